"""``lemoncore.plugin``, the one module plugin authors import, in the manner of httpx's
``tests/test_exported_members.py`` (``__all__`` is the sorted public members), adapted to a
lazy module: its names are looked up on first use, so the members are ``_EXPORTS``'s keys,
the ``TYPE_CHECKING`` block (what mypy and IDEs see) must import exactly them, and each
must come from the module the map names, where it is defined, not re-exported."""

from __future__ import annotations

import ast
import inspect
import types
from importlib import import_module
from pathlib import Path

import pytest

import lemoncore.plugin as plugin

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path(plugin.__file__).read_text()
PLUGINS = ROOT / "plugins"


def type_checking_imports() -> dict[str, str]:
    """``name -> module`` for each ``from MODULE import NAME as NAME`` under
    ``if TYPE_CHECKING:``."""
    found: dict[str, str] = {}
    for node in ast.parse(SOURCE).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module
                for alias in statement.names:
                    assert alias.asname == alias.name, f"{alias.name}: import it 'as' itself"
                    module = statement.module
                    found[alias.name] = (
                        f"{module}.{alias.name}" if module == "lemoncore" else module
                    )
    return found


def test_all_is_the_sorted_exports() -> None:
    assert plugin.__all__ == sorted(plugin._EXPORTS)
    public = {name for name in dir(plugin) if not name.startswith("_")}
    assert public - {"annotations", "import_module", "TYPE_CHECKING", "Any"} == set(plugin.__all__)


def test_the_type_checking_block_imports_exactly_all_from_the_named_modules() -> None:
    assert type_checking_imports() == plugin._EXPORTS


def assigned_at_top_level(module: types.ModuleType, name: str) -> bool:
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


@pytest.mark.parametrize("name", sorted(plugin._EXPORTS))
def test_each_name_resolves_to_what_its_module_defines(name: str) -> None:
    value = getattr(plugin, name)
    source = import_module(plugin._EXPORTS[name])
    if isinstance(value, types.ModuleType):
        assert value is source and source.__name__.rpartition(".")[2] == name
        return
    assert value is getattr(source, name)
    defined = inspect.unwrap(value) if callable(value) else value  # through functools.cache
    defined_in = getattr(defined, "__module__", None)
    if isinstance(defined, (type, types.FunctionType)) and defined_in is not None:
        assert defined_in == source.__name__, f"{name} is defined in {defined_in}"
    else:  # a constant, alias or marker: assigned in that module, not imported into it
        assert assigned_at_top_level(source, name), f"{source.__name__} does not assign {name}"
    assert name in plugin.__dict__  # looked up once, then kept


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        plugin.nope  # noqa: B018
    assert "Recipe" in dir(plugin)


def plugin_imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    return [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lemoncore")
        for alias in node.names
    ]


# Plugin tests that test lemoncore's own machinery on purpose: the worker CLI and RPC
# probe (llama.cpp's rpc-server), the options checker, start-failure classification,
# the benchmark's scenarios, `lemon validate` run in-process, and lemoncore's embedding
# API (``import lemoncore``). Nothing a third-party plugin needs.
INTERNAL_TESTED = {
    "lemoncore.bench",
    "lemoncore.cli.validate",
    "lemoncore.cli.worker",
    "lemoncore.exits",
    "lemoncore.options",
    "lemoncore.rpc",
    "lemoncore.validation.run",
}


@pytest.mark.parametrize(
    "path",
    sorted(p for p in PLUGINS.glob("*/lemon_plugin_*/**/*.py")),
    ids=lambda p: str(p.relative_to(PLUGINS)),
)
def test_plugin_code_imports_only_the_plugin_module(path: Path) -> None:
    assert {module for module, _ in plugin_imports(path)} <= {"lemoncore.plugin"}


@pytest.mark.parametrize(
    "path", sorted(PLUGINS.glob("*/tests/**/*.py")), ids=lambda p: str(p.relative_to(PLUGINS))
)
def test_plugin_tests_import_the_plugin_module_or_internals_they_test(path: Path) -> None:
    allowed = {"lemoncore.plugin", *INTERNAL_TESTED}
    if path.name == "test_embedded.py":  # lemoncore embedded in another app
        allowed.add("lemoncore")
    assert {module for module, _ in plugin_imports(path)} <= allowed
