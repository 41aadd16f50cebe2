"""Unloads servers left idle past their ``keep_alive``, as
:func:`~lemoncore.serving.eviction.idle` decides: one background loop the router starts
in its task group and wakes (:meth:`IdleUnloader.wake`) when a request ends or a load
changes the picture."""

from __future__ import annotations

import math
import time

import anyio
import structlog

from lemoncore.serving.eviction import idle, next_idle
from lemoncore.serving.fleet import Fleet

log = structlog.get_logger("lemoncore.serving.idle")


class IdleUnloader:
    """Evicts through ``fleet`` under ``lock`` (the router's load lock)."""

    def __init__(self, fleet: Fleet, lock: anyio.Lock) -> None:
        self.fleet, self.lock = fleet, lock
        self._changed = anyio.Event()

    def wake(self) -> None:
        """Decide again now: a request ended, or a load changed the servers or their
        ``keep_alive``."""
        self._changed.set()

    async def run(self) -> None:
        """Unload servers idle past their ``keep_alive``, one at a time, deciding again
        under the load lock (a request may have arrived meanwhile); sleep until the next
        may be, or until :meth:`wake`. Runs until cancelled; a failed unload is logged."""
        while True:
            self._changed = anyio.Event()
            residents = self.fleet.residents()
            if idle(residents, time.monotonic()).evict:
                async with self.lock:
                    due = idle(self.fleet.residents(), time.monotonic()).evict
                    if due and (server := self.fleet.servers.get(due[0].name)) is not None:
                        try:
                            await self.fleet.evict(server, due[0])
                        except Exception:  # it is out of service already: log, go on
                            log.exception("idle unload failed", model=server.model.name)
                continue
            until = next_idle(residents)
            with anyio.move_on_after(
                math.inf if until is None else max(0.0, until - time.monotonic())
            ):
                await self._changed.wait()
