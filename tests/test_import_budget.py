"""The plugin-facing API imports light: no web stack, no HTTP or hub client.

What a plugin imports (``lemoncore.hookspecs``, ``lemoncore.recipes``, ``lemoncore.launch``,
``lemoncore.errors``) must load none of the HTTP or async stack: the package's own
``__init__`` resolves ``create_app`` and friends lazily, and type-only imports stay under
``TYPE_CHECKING``. Each check runs in a fresh interpreter.

Import time is measured, not asserted (tests check behaviour, not timings):
``benchmarks/plugin_import.py``, with its numbers in ``benchmarks/RESULTS.md``.

``lemon --help`` (and each command's ``--help``) builds the whole argparse tree, so every
``lemoncore.cli`` module is imported, and must load nothing heavy: not the settings
(pydantic, pydantic-settings), httpx, anyio, structlog, rich, psutil or numpy; each command
imports those when it runs. Measured on the 2-core machine (best of 5, ``python -m
lemoncore.cli --help``): 0.37-0.60 s before (the settings and httpx at module level), about
0.05 s over a bare interpreter's start after. The check is on what gets imported, not the
time.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest

PLUGIN_API = ("lemoncore.hookspecs", "lemoncore.recipes", "lemoncore.launch", "lemoncore.errors")
HEAVY = (
    "starlette",
    "httpx",
    "huggingface_hub",
    "hypercorn",
    "anyio",
    "structlog",
    "pydantic_settings",
    "lemoncore.app",
    "lemoncore.serving.router",
    "lemoncore.settings",
)
CLI_HEAVY = (
    "pydantic",
    "pydantic_core",
    "pydantic_settings",
    "httpx",
    "anyio",
    "structlog",
    "rich",
    "psutil",
    "numpy",
    "starlette",
    "hypercorn",
    "huggingface_hub",
    "lemoncore.settings",
    "lemoncore.api",
    "lemoncore.rpc.supervisor",
    "lemoncore.core",
)
REAL_PLUGINS = (
    "lemon_plugin_llamacpp",
    "lemon_plugin_vte",
    "lemon_plugin_oci",
    "lemon_plugin_ollama_api",
)
PLUGIN_HEAVY = (
    "starlette",
    "hypercorn",
    "httpx",
    "httpcore",
    "huggingface_hub",
    "pydantic_settings",
    "lemoncore.settings",
    "lemoncore.app",
    "lemoncore.core",
)


def fresh(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    ).stdout


def loaded_after(statement: str) -> set[str]:
    return set(
        json.loads(
            fresh(f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))")
        )
    )


def heavy(modules: set[str], names: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in names))


@pytest.mark.parametrize("module", ["lemoncore", *PLUGIN_API])
def test_the_plugin_api_loads_no_web_or_async_stack(module: str) -> None:
    assert heavy(loaded_after(f"import {module}")) == []


@pytest.mark.parametrize("plugin", REAL_PLUGINS)
def test_a_real_plugin_imports_no_web_stack_http_or_hub_client(plugin: str) -> None:
    assert heavy(loaded_after(f"import {plugin}"), PLUGIN_HEAVY) == []


def test_the_plugin_module_loads_nothing_until_a_name_is_used() -> None:
    modules = loaded_after("import lemoncore.plugin")
    assert sorted(m for m in modules if m.startswith("lemoncore.")) == ["lemoncore.plugin"]
    assert heavy(loaded_after("from lemoncore.plugin import FieldCheck, Checkpoint"), HEAVY) == []


def test_the_package_itself_loads_nothing_until_asked() -> None:
    modules = loaded_after("import lemoncore")
    assert sorted(m for m in modules if m.startswith("lemoncore.")) == []
    assert "pydantic" not in modules


def test_the_package_names_still_resolve_lazily() -> None:
    import lemoncore

    assert lemoncore.__version__ == importlib.metadata.version("lemoncore")
    from lemoncore import Settings, create_app, hookimpl, lifespan
    from lemoncore.app import create_app as app_create_app
    from lemoncore.hookspecs import hookimpl as spec_hookimpl

    assert (create_app, hookimpl) == (app_create_app, spec_hookimpl)
    assert callable(lifespan) and Settings.__name__ == "Settings"
    assert {"Settings", "create_app", "hookimpl", "lifespan", "__version__"} <= set(dir(lemoncore))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lemoncore.nope  # noqa: B018


HELP = """
import contextlib, io, json, sys
from lemoncore.cli import main
with contextlib.redirect_stdout(io.StringIO()) as shown, contextlib.suppress(SystemExit):
    main(sys.argv[1:])
print(json.dumps({"help": shown.getvalue(), "modules": sorted(sys.modules)}))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["serve", "--help"],
        ["explain", "--help"],
        ["worker", "--help"],
        ["ps", "--help"],
    ],
)
def test_lemon_help_loads_no_settings_http_or_async_stack(argv: list[str]) -> None:
    """What the ``lemon`` console script runs (``lemoncore.cli:main``), in a fresh
    interpreter."""
    done = json.loads(
        subprocess.run(
            [sys.executable, "-c", HELP, *argv],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    )
    assert done["help"].startswith("usage: lemon")
    assert heavy(set(done["modules"]), CLI_HEAVY) == []
