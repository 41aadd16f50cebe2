"""lemoncore: local LLMs behind one OpenAI-compatible API, backends as plugins.

Importing the package loads nothing else: ``create_app``, ``lifespan``, ``Settings``,
``hookimpl`` and ``__version__`` are looked up on first use (PEP 562), so a plugin that
imports ``lemoncore.hookspecs`` or ``lemoncore.recipes`` does not pay for the web stack
(``tests/test_import_budget.py`` holds it to that).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lemoncore.app import create_app, lifespan
    from lemoncore.hookspecs import hookimpl
    from lemoncore.settings import Settings

    __version__: str

__all__ = ["Settings", "__version__", "create_app", "hookimpl", "lifespan"]

_LAZY = {
    "create_app": "lemoncore.app",
    "lifespan": "lemoncore.app",
    "hookimpl": "lemoncore.hookspecs",
    "Settings": "lemoncore.settings",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lemoncore")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    elif name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
