"""Auto-eviction (Lemonade's EvictionEngine, src/cpp/server/eviction_engine.cpp): every
``eviction.interval`` seconds, while auto-eviction can apply (the global ``auto_evict``,
or a loaded server that opted in), the host's memory is read and
:func:`~lemoncore.serving.eviction.auto_evict` decides what goes, again under the
router's load lock; :meth:`AutoEvictor.evaluate` runs one pass at once with a given
used fraction (Lemonade's ``/internal/simulate-vram-pressure``; -1: idle only). Each
pass then downsizes the servers :func:`~lemoncore.serving.downsize.due` names, after the
lock is released (as Lemonade's engine does): a request arriving meanwhile cancels it.

lemoncore measures host memory (psutil), which is what its CPU and unified-memory
engines use; each server's share is what its process reports (peak RSS)."""

from __future__ import annotations

import time

import anyio
import structlog

from lemoncore.serving import downsize
from lemoncore.serving.eviction import Decision, Memory, auto_evict
from lemoncore.serving.fleet import Fleet
from lemoncore.serving.server import LoadedServer
from lemoncore.settings import Settings

log = structlog.get_logger("lemoncore.serving.autoevict")

DOWNSIZE_TIMEOUT_S = 10.0  # for an engine to give back what it holds


def host_memory() -> Memory:
    """The host's used memory now (blocking: run in a thread)."""
    import psutil  # imported when used: the core imports without it working

    vm = psutil.virtual_memory()
    return Memory((vm.total - vm.available) / vm.total, vm.total)


class AutoEvictor:
    """Evicts through ``fleet`` under ``lock`` (the router's load lock), as ``settings``
    say now (they may change at run time)."""

    def __init__(self, settings: Settings, fleet: Fleet, lock: anyio.Lock) -> None:
        self.settings, self.fleet, self.lock = settings, fleet, lock

    def active(self) -> bool:
        """Whether any loaded server may be auto-evicted."""
        default = self.settings.eviction.auto_evict
        return any(r.opted_in(default) for r in self.fleet.residents())

    async def evaluate(self, used: float | None, measured: Memory | None = None) -> Decision:
        """One pass: ``used`` a fraction (``None`` or below 0: idle only), or the
        ``measured`` memory; decided and carried out under the lock."""
        memory = measured or (None if used is None or used < 0 else Memory(used))
        async with self.lock:
            eviction = self.settings.eviction
            decision = auto_evict(
                self.fleet.residents(),
                time.monotonic(),
                eviction.auto_evict,
                memory,
                eviction.auto_evict_threshold_pct,
            )
            for order in decision.evict:
                if (server := self.fleet.servers.get(order.name)) is not None:
                    try:
                        await self.fleet.evict(server, order)
                    except Exception:  # out of service already: log, go on
                        log.exception("auto-eviction failed", model=order.name)
            residents = downsize.due(self.fleet.residents(), time.monotonic(), eviction.auto_evict)
            due = [(self.fleet.servers[r.name], r.last_used) for r in residents]
        for server, since in due:  # outside the lock: an engine may take its time
            if self.fleet.servers.get(server.model.name) is server and server.process.alive:
                await self._downsize(server, since)
        return decision

    @staticmethod
    async def _downsize(server: LoadedServer, since: float) -> None:
        """Have ``server``'s engine give back what it holds. It counts as downsized only
        if no request came since ``since`` (its last use when it was found due); a request
        cancels it; a failure leaves it as it was (logged). Either way it is not tried
        again before its next request."""
        assert server.downsize is not None
        server.downsize_tried = True
        with anyio.CancelScope() as server.downsizing:
            try:
                with anyio.fail_after(DOWNSIZE_TIMEOUT_S):
                    await server.downsize(server.client)
            except Exception:  # the engine's failure, or its plugin's: it stays ready
                log.warning("downsize failed; left ready", model=server.model.name, exc_info=True)
                return
            finally:
                server.downsizing = None
            server.downsized = (
                server.process.alive and server.in_flight == 0 and server.last_used == since
            )
            log.info("downsized", model=server.model.name, kept=server.downsized)

    async def run(self) -> None:
        """Evaluate every ``interval`` seconds while :meth:`active`; runs until
        cancelled."""
        while True:
            await anyio.sleep(self.settings.eviction.interval)
            if self.active():
                await self.evaluate(None, await anyio.to_thread.run_sync(host_memory))
