"""A pin is the administrator's: a caller without management rights (``manage=False``, what
:class:`~lemoncore.api.gateway.Gateway` passes for a request with the API key alone)
cannot reload, unpin or unload a pinned model, not by racing a pin that lands first, and
not after the model crashed; a start after a crash keeps the pin."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from lemoncore import Settings, create_app
from lemoncore.app import core_of
from lemoncore.serving.refusals import PinnedModel
from lemoncore.serving.router import Router

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, tiny_plugin

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def router(tmp_path: Path) -> AsyncIterator[Router]:
    app = create_app(
        Settings(cache_dir=tmp_path, plugins_allow=""), plugins={"tiny": tiny_plugin(tmp_path)}
    )
    async with app.router.lifespan_context(app):
        yield core_of(app).router


async def test_an_unload_queued_behind_a_pin_is_refused(tmp_path: Path, anyio_backend: str) -> None:
    async with router(tmp_path) as r:
        await r.load(MODEL)
        refused: list[BaseException] = []

        async def unload() -> None:
            try:
                await r.unload(MODEL, manage=False)
            except PinnedModel as exc:
                refused.append(exc)

        lock = r._lock
        async with anyio.create_task_group() as tg:
            async with lock:  # a long load holds the lock: both requests queue, pin first
                tg.start_soon(r.load, MODEL, None, True)
                while lock.statistics().tasks_waiting < 1:
                    await anyio.lowlevel.checkpoint()
                tg.start_soon(unload)
                while lock.statistics().tasks_waiting < 2:
                    await anyio.lowlevel.checkpoint()
        assert refused and r.loaded(MODEL) is not None and MODEL in r.pins


async def test_a_pin_outlives_a_crash(tmp_path: Path, anyio_backend: str) -> None:
    async with router(tmp_path) as r:
        server = await r.load(MODEL, {"ctx_size": 2048}, pinned=True)
        assert server.process.pid is not None
        os.kill(server.process.pid, signal.SIGKILL)
        await server.process.exited.wait()
        with pytest.raises(PinnedModel):  # not started again with the caller's options
            await r.load(MODEL, {"ctx_size": 777}, manage=False)
        again = await r.load(MODEL, explicit=False)  # a request's load: as pinned
        assert again.pinned and again is not server
        with pytest.raises(PinnedModel):
            await r.unload(MODEL, manage=False)
        await r.unload(MODEL)  # the administrator's unload ends the pin
        assert MODEL not in r.pins
