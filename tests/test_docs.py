"""The hook reference has one source, the hookspecs' docstrings: every hook's docstring
follows the one format, docs/hooks.md is exactly what lemoncore.hookdoc renders from them,
and every hook is implemented by some tested plugin. That the core calls every hook is
tests/test_hooks_called.py."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from lemoncore import hookdoc, hookspecs

ROOT = Path(__file__).resolve().parents[1]
HOOKS = {
    name: fn for name, fn in vars(hookspecs).items() if callable(fn) and hasattr(fn, "lemon_spec")
}
OWNER_HOOKS = {"install", "refresher", "preflight", "launch", "normalize_request"}
# test_hooks_called.py implements every hook by construction; it proves the core calls
# them, not that a plugin someone tests does.
TEST_TEXT = "\n".join(
    p.read_text()
    for pattern in ("tests/*.py", "plugins/*/tests/*.py", "examples/*/tests/*.py")
    for p in ROOT.glob(pattern)
    if p.name != "test_hooks_called.py"
)
PLUGIN_TEXT = TEST_TEXT + "\n".join(p.read_text() for p in ROOT.glob("plugins/*/*/*.py"))


def test_the_hook_list_is_what_lemoncore_declares() -> None:
    assert set(HOOKS) == {
        "register_recipes",
        "register_backends",
        "register_models",
        "register_lock",
        "startup_tasks",
        "effective_device",
        "effective_is_amd_gpu",
        "slot_policy",
        "install",
        "preflight",
        "launch",
        "normalize_request",
        "refresher",
        "migrations",
        "register_endpoints",
        "register_routes",
        "register_field_checks",
        "register_error_shapes",
    }


def test_docs_hooks_md_is_generated_from_the_hookspecs() -> None:
    assert (ROOT / "docs/hooks.md").read_text() == hookdoc.render(), (
        "docs/hooks.md differs from the hookspecs' docstrings; edit lemoncore/hookspecs/, "
        f"not the page, and regenerate it: {hookdoc.COMMAND}"
    )


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_hook_docstring_states_the_whole_contract(name: str) -> None:
    fn = HOOKS[name]
    doc = inspect.getdoc(fn) or ""
    documented = re.findall(r"^:param (\w+):", doc, re.MULTILINE)
    assert documented == list(inspect.signature(fn).parameters), (
        f"{name}: one ':param NAME:' per parameter, in order"
    )
    assert re.search(r"^:returns: \S", doc, re.MULTILINE), f"{name}: no ':returns:'"
    assert re.search(r"^\.\. versionadded:: \d+\.\d+$", doc, re.MULTILINE), (
        f"{name}: no '.. versionadded:: X.Y'"
    )
    assert re.search(r"^Example::\n\n    @hookimpl\n    def " + name + r"\(", doc, re.MULTILINE), (
        f"{name}: no example implementing it"
    )
    flat = " ".join(doc.split())
    first_result = bool(hookdoc.spec_options(fn).get("firstresult"))
    assert ("First result" in flat) == first_result, (
        f"{name}: say 'First result' (and what None means) exactly when firstresult=True"
    )
    assert ("Owner hook: called only on the plugin that registered ``backend``" in flat) == (
        name in OWNER_HOOKS
    ), f"{name}: say whether it is an owner hook"
    if name not in OWNER_HOOKS:
        assert "not an owner hook" in flat


def test_the_module_docstring_names_the_owner_hooks() -> None:
    doc = " ".join((hookspecs.__doc__ or "").split())
    listed = doc.split("**Owner hooks.**", 1)[1].split(" are about one backend", 1)[0]
    assert set(re.findall(r"``(\w+)``", listed)) == OWNER_HOOKS


def test_the_page_keeps_examples_as_python_and_no_rest_markup() -> None:
    page = hookdoc.render()
    prose = re.sub(r"```python\n.*?\n```", "", page, flags=re.DOTALL)
    assert "``" not in prose and ":param" not in prose and ".. version" not in prose
    for name in HOOKS:
        section = page.split(f"## `{name}(", 1)[1].split("\n## ", 1)[0]
        assert "```python\n@hookimpl\ndef " + name + "(" in section


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_hook_is_implemented_by_some_tested_plugin(name: str) -> None:
    assert re.search(rf"def {name}\(", PLUGIN_TEXT), f"no plugin or test implements {name}"


def test_the_changelog_has_the_current_release() -> None:
    from lemoncore import __version__

    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {__version__}" in changelog or f"## Unreleased ({__version__[:3]}" in changelog
