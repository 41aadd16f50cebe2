"""A load that runs in the router's task group, not the caller's: a caller that gives up
(or is cancelled) does not cancel it, and one that waits ``load_timeout`` seconds is
answered 503 ``model_loading`` with ``Retry-After`` while it goes on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

from lemoncore.serving.admission import Admission, NotAdmitted
from lemoncore.serving.server import LoadedServer


@dataclass
class PendingLoad:
    """The load of ``name`` for one caller; with ``hold``, the server is counted busy for
    the caller (:meth:`Admission.hold`) before it is handed over, so no other load evicts
    it first, and given back if the caller is gone."""

    name: str
    hold: bool
    waiting: bool = True  # the caller still waits
    done: anyio.Event = field(default_factory=anyio.Event)
    server: LoadedServer | None = None
    error: Exception | None = None

    async def run(self, load: Callable[[], Awaitable[LoadedServer]]) -> None:
        """Run ``load`` (in the router's task group); its error is kept for the caller."""
        try:
            server = await load()
            if self.hold and self.waiting:  # no checkpoint since the lock's release
                Admission.hold(server)
                self.server = server
            elif not self.hold:
                self.server = server
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            self.error = exc
        finally:
            self.done.set()

    async def wait(self, load_timeout: float) -> LoadedServer:
        """The loaded server, or the load's error, within ``load_timeout`` seconds; after that
        :class:`NotAdmitted` (``model_loading``) while the load goes on. A caller cancelled
        meanwhile gives back what was held for it."""
        try:
            with anyio.move_on_after(load_timeout):
                await self.done.wait()
        except BaseException:
            if self.server is not None and self.hold:
                Admission.release(self.server)
            raise
        finally:
            self.waiting = False
        if self.error is not None:
            raise self.error
        if self.server is None:
            raise NotAdmitted(
                f"{self.name} is still loading after {load_timeout:.0f} s (a large "
                "download or a slow start); the load goes on, retry shortly",
                code="model_loading",
                retry_after=5,
            )
        return self.server
