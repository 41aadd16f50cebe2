"""The loaded models as ``/api/v1/health`` (and :meth:`Gateway.loaded`) show them:
:class:`~lemoncore.api.replies.LoadedModel` with whether each is streaming now
(:mod:`lemoncore.api.telemetry`) and its launch command as shown.

An engine is started on the model's file resolved (a Hugging Face cache blob,
``…/blobs/<sha256>``: lemoncore resolves links so no one can swap the file under it).
The command shown names the file as its checkpoint does instead (the snapshot path,
``…/snapshots/<revision>/<file>``), as Lemonade Server's ``launch_command`` does
(``src/cpp/server/router.cpp``, ``Router::get_all_loaded_models``: the command line it
started the engine with, which holds the snapshot path).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from lemoncore.api import replies, telemetry
from lemoncore.core import Core
from lemoncore.models.checkpoints import Checkpoint, ModelError
from lemoncore.serving.server import LoadedServer

_SHOWN_MAX = 64  # launch commands kept as shown (a few per loaded model at most)
_shown: dict[tuple[str, int | None, tuple[str, ...]], list[str]] = {}


def shown_command(argv: Sequence[str], resolved: str, named: str) -> list[str]:
    """``argv`` with each word that is ``resolved`` (or ends ``=resolved``) naming
    ``named`` instead."""
    out = []
    for word in argv:
        if word == resolved:
            word = named
        elif word.endswith("=" + resolved):
            word = word[: -len(resolved)] + named
        out.append(word)
    return out


def _named_file(core: Core, server: LoadedServer) -> tuple[str, str] | None:
    """``(resolved, named)``: the model's file as the engine got it and as its
    checkpoint names it, if they differ."""
    try:
        cp = Checkpoint.parse(server.model.checkpoint)
        folder, _ = core.models.checkpoint_dir(server.model)
    except (ModelError, OSError, ValueError):
        return None
    if folder is None:
        return None
    named = str(folder / (cp.filename or Path(cp.location).name))
    resolved = os.path.realpath(named)
    return (resolved, named) if resolved != named else None


def command(core: Core, server: LoadedServer) -> list[str]:
    """``server``'s launch command as shown, looked up once per process."""
    argv = tuple(server.process.argv)
    key = (server.model.name, server.process.pid, argv)
    found = _shown.get(key)
    if found is None:
        pair = _named_file(core, server)
        found = list(argv) if pair is None else shown_command(argv, *pair)
        if len(_shown) >= _SHOWN_MAX:
            _shown.pop(next(iter(_shown)))
        _shown[key] = found
    return found


def loaded_models(core: Core) -> list[replies.LoadedModel]:
    """Every loaded model, as ``/api/v1/health`` lists them."""
    streaming = telemetry.activity(core.router).streaming
    return [
        replies.LoadedModel.of(s, streaming[s.model.name] > 0, command(core, s))
        for s in core.router.servers.values()
    ]
