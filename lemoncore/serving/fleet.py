"""The running servers: who runs what, evictions (drain, then stop), and what happens
when a server crashes or wedges. The router decides what to load; this carries out the
removals :mod:`lemoncore.serving.eviction` decides and keeps the counts ``/metrics`` shows
(:class:`Metrics`) and each model's :class:`~lemoncore.serving.history.History`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import structlog

from lemoncore.exits import EngineExit, classify
from lemoncore.launch import Runner
from lemoncore.serving.admission import Admission
from lemoncore.serving.eviction import Decision, EvictionKind, EvictionOrder, Resident, wedged
from lemoncore.serving.history import History, ModelEventKind
from lemoncore.serving.server import LoadedServer
from lemoncore.supervisor import BackendProcess

log = structlog.get_logger("lemoncore.serving.fleet")

DEATH_WAIT_S = 1.0  # after a broken connection, how long to wait to learn the backend died


@dataclass(frozen=True)
class Metrics:
    """The counts ``/metrics`` shows, copied at one moment."""

    loads: int  # servers started
    loaded: int  # servers running now
    evictions: Mapping[EvictionKind, int]  # servers stopped, by kind (every kind present)
    tokens: Mapping[tuple[str, str], int]  # (model, usage kind) -> tokens reported
    answers: Mapping[tuple[str, str, int], int]  # (model, path, status) -> answers
    crashes: Mapping[str, int]  # model -> its engine's crashes while loaded


class Fleet:
    """The loaded servers by model name, and the loads, evictions, tokens and answers
    counted."""

    def __init__(self, admission: Admission, stop_grace: float) -> None:
        self.admission, self.stop_grace = admission, stop_grace
        self.servers: dict[str, LoadedServer] = {}
        self.loads = 0  # servers added
        self.evictions: Counter[EvictionKind] = Counter(dict.fromkeys(EvictionKind, 0))
        self.tokens: Counter[tuple[str, str]] = Counter()  # (model, kind), from usage
        self.answers: Counter[tuple[str, str, int]] = Counter()  # (model, path, status)
        self.history = History()
        self.task_group: anyio.abc.TaskGroup | None = None  # for removals in the background
        self._restarting: list[LoadedServer] = []  # wedged, being stopped in the background

    def add(self, server: LoadedServer) -> None:
        """Put a started server in service (counted in :attr:`loads`)."""
        self.servers[server.model.name] = server
        self.loads += 1
        self.history.record(
            server.model.name,
            ModelEventKind.LOADED,
            f"{server.recipe.name}:{server.backend.name} on {server.device.value}",
        )
        server.process.on_exit(lambda _: self._forget_if_crashed(server))

    def running(self, name: str) -> LoadedServer | None:
        """Model ``name``'s server while its process is alive, else ``None``."""
        server = self.servers.get(name)
        return server if server is not None and server.process.alive else None

    def metrics(self) -> Metrics:
        return Metrics(
            self.loads,
            len(self.servers),
            dict(self.evictions),
            dict(self.tokens),
            dict(self.answers),
            dict(self.history.crashes),
        )

    def residents(self) -> list[Resident]:
        """The loaded servers as the eviction policy sees them."""
        return [s.resident() for s in self.servers.values()]

    async def carry_out(self, decision: Decision) -> None:
        for eviction in decision.evict:
            if (victim := self.servers.get(eviction.name)) is not None:
                await self.evict(victim, eviction)

    async def evict(
        self, server: LoadedServer, why: EvictionOrder, drain_timeout: float | None = None
    ) -> None:
        """Remove from service, wait for in-flight requests to finish, then stop."""
        if self.servers.get(server.model.name) is server:
            del self.servers[server.model.name]
        self.evictions[why.kind] += 1
        self.history.record(server.model.name, ModelEventKind.UNLOADED, why.reason, why.kind)
        log.info(
            "evicting",
            model=server.model.name,
            kind=why.kind.value,
            reason=why.reason,
            in_flight=server.in_flight,
        )
        with anyio.move_on_after(drain_timeout):
            await server.drained.wait()
        await server.process.stop(self.stop_grace)
        await server.client.aclose()

    async def evict_all(self, why: str, drain_timeout: float | None = None) -> None:
        """Evict every server at once (kind ``unload``, reason ``why``), and finish
        stopping those a wedge restart is stopping in the background (at shutdown that
        task is cancelled: the stop must not be)."""
        async with anyio.create_task_group() as tg:
            for server in list(self.servers.values()):
                tg.start_soon(
                    self.evict,
                    server,
                    EvictionOrder(server.model.name, EvictionKind.UNLOAD, why),
                    drain_timeout,
                )
            for server in list(self._restarting):
                tg.start_soon(server.process.stop, self.stop_grace)

    def count_usage(self, model: str, usage: Any) -> None:
        """Add a backend answer's ``usage`` (prompt and completion tokens) to the totals."""
        if isinstance(usage, dict):
            for kind in ("prompt_tokens", "completion_tokens"):
                if isinstance(n := usage.get(kind), int) and n >= 0:
                    self.tokens[model, kind] += n

    def record_outcome(self, server: LoadedServer, failed: bool) -> None:
        """Feed wedge detection; a wedged server is restarted (the next request gets a
        fresh process)."""
        if (
            self.admission.wedged_after(server, failed)
            and self.servers.get(server.model.name) is server
        ):
            log.warning(
                "backend wedged: restarting it", model=server.model.name, failures=server.failures
            )
            del self.servers[server.model.name]
            [why] = wedged(server.resident(), server.failures).evict
            self._restarting.append(server)
            self._background().start_soon(self._restart, server, why)

    async def _restart(self, server: LoadedServer, why: EvictionOrder) -> None:
        try:
            await self.evict(server, why)
        finally:
            self._restarting = [s for s in self._restarting if s is not server]

    async def death(self, server: LoadedServer, within: float = DEATH_WAIT_S) -> EngineExit | None:
        """After a transport error: how the backend died, waiting up to ``within``
        seconds for its end (it is forgotten, so a retry reloads it); ``None`` when it
        still runs (the connection broke on its own)."""
        with anyio.move_on_after(within):
            await server.process.exited.wait()
        if server.process.crashed:
            self._forget_if_crashed(server)
            return exit_of(server.process)
        return None

    def _forget_if_crashed(self, server: LoadedServer) -> None:
        if server.process.crashed and self.servers.get(server.model.name) is server:
            del self.servers[server.model.name]
            self._background().start_soon(server.client.aclose)
            ended = exit_of(server.process)
            self.history.record(server.model.name, ModelEventKind.CRASHED, ended.headline)
            log.warning(
                "model unloaded: backend crashed; the next request reloads it",
                model=server.model.name,
                code=server.process.returncode,
                signal=ended.signal,
                reason=ended.headline,
            )

    def _background(self) -> anyio.abc.TaskGroup:
        assert self.task_group is not None, "the router starts the fleet's task group"
        return self.task_group


def exit_of(process: Runner) -> EngineExit:
    """How ``process`` ended, explained: a native process with its spec's
    ``crash_advice``; a runner from its return code and last lines."""
    if isinstance(process, BackendProcess):
        return process.exit_report()
    return classify(process.returncode, process.last_lines)
