"""The auto-evictor's downsize pass on stub servers: it runs outside the load lock, counts
only when no request came, is cancelled by a request, is tried once per idle spell
(done or failed), and skips a server that left the fleet meanwhile."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.abc
import httpx
import pytest

from lemoncore.launch import Lifecycle
from lemoncore.recipes import Device, ModelInfo, Recipe, SlotPolicy
from lemoncore.serving.admission import Admission
from lemoncore.serving.autoevict import AutoEvictor
from lemoncore.serving.eviction import Residency
from lemoncore.serving.fleet import Fleet
from lemoncore.serving.server import LoadedServer
from lemoncore.settings import Settings

pytestmark = pytest.mark.anyio
IDLE = -1.0  # an idle-only pass


class Stub(Lifecycle):
    """A running server."""

    base_url, argv, pid, returncode = "http://stub", ("stub",), None, None
    transport = None

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.mark_ready()

    def peak_memory(self) -> int | None:
        return None

    async def start(self, task_group: anyio.abc.TaskGroup, ready_within: float) -> None: ...

    async def stop(self, grace: float) -> None:
        self.begin_stop()
        self.mark_exited()


def server(name: str, downsize: Callable[[httpx.AsyncClient], Awaitable[None]]) -> LoadedServer:
    recipe = Recipe(name="stub", display_name="Stub")
    model = ModelInfo(name=name, recipe="stub", checkpoint="file:/m.gguf")
    return LoadedServer(
        model,
        recipe,
        None,  # type: ignore[arg-type]  # never read here
        {},
        Device.CPU,
        False,
        SlotPolicy.STANDARD,
        Stub(name),
        httpx.AsyncClient(base_url="http://stub"),
        residency=Residency(auto_evict=True, downsize_idle_timeout=0, evict_idle_timeout=3600),
        downsize=downsize,
    )


def evictor(tmp_path: Path, *servers: LoadedServer) -> AutoEvictor:
    settings = Settings(cache_dir=tmp_path)
    fleet = Fleet(Admission(settings), 1.0)
    fleet.servers = {s.model.name: s for s in servers}
    return AutoEvictor(settings, fleet, anyio.Lock())


async def test_a_downsize_runs_outside_the_lock_and_once_per_idle_spell(
    tmp_path: Path, anyio_backend: str
) -> None:
    calls: list[bool] = []

    async def downsize(client: httpx.AsyncClient) -> None:
        calls.append(ae.lock.locked())

    a = server("a", downsize)
    ae = evictor(tmp_path, a)
    await ae.evaluate(IDLE)
    assert calls == [False] and a.downsized and a.resident().downsize_tried
    await ae.evaluate(IDLE)
    assert calls == [False]  # not again while idle
    Admission.hold(a)
    assert not a.downsized
    Admission.release(a)
    await ae.evaluate(IDLE)
    assert calls == [False, False] and a.downsized


async def test_a_failed_downsize_leaves_it_ready_and_is_not_retried(
    tmp_path: Path, anyio_backend: str
) -> None:
    calls: list[str] = []

    async def fails(client: httpx.AsyncClient) -> None:
        calls.append("x")
        raise httpx.ConnectError("engine gone")

    a = server("a", fails)
    ae = evictor(tmp_path, a)
    await ae.evaluate(IDLE)
    await ae.evaluate(IDLE)
    assert calls == ["x"] and not a.downsized


async def test_a_request_cancels_a_downsize_under_way(tmp_path: Path, anyio_backend: str) -> None:
    started = anyio.Event()

    async def slow(client: httpx.AsyncClient) -> None:
        started.set()
        await anyio.sleep_forever()

    a = server("a", slow)
    ae = evictor(tmp_path, a)
    with anyio.fail_after(5):  # the engine never answers: only the cancel ends it
        async with anyio.create_task_group() as tg:
            tg.start_soon(ae.evaluate, IDLE)
            await started.wait()
            Admission.hold(a)
    assert not a.downsized and a.downsizing is None and not a.resident().downsize_tried
    Admission.release(a)


async def test_a_server_gone_meanwhile_is_skipped(tmp_path: Path, anyio_backend: str) -> None:
    done: list[str] = []

    async def first(client: httpx.AsyncClient) -> None:
        ae.fleet.servers.pop("b")  # b crashed while a was downsized
        await b.process.stop(0)
        done.append("a")

    async def second(client: httpx.AsyncClient) -> None:
        done.append("b")

    a, b = server("a", first), server("b", second)
    ae = evictor(tmp_path, a, b)
    await ae.evaluate(IDLE)
    assert done == ["a"] and a.downsized and not b.downsized
