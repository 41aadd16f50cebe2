"""A backend's answer while it is relayed, and the one place its outcome is recorded.

:func:`~lemoncore.serving.forwarding.exchange` returns an :class:`Answer`; whoever relays
it (the ``/v1`` relay, a translated stream, a plugin through the gateway) says how it
ended (:meth:`Answer.end`) and what it used (:attr:`Answer.usage`), and closes it. Closing
records both exactly once: the tokens to the metrics, the outcome to wedge detection.
One definition of failure holds on every path (:func:`failed`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from lemoncore.exits import EngineExit

if TYPE_CHECKING:
    from lemoncore.serving.fleet import Fleet
    from lemoncore.serving.server import LoadedServer

STREAM_DEATH_WAIT_S = 0.5  # a broken stream's error frame waits this long to learn why


def failed(status: int, broke: bool = False, error_event: bool = False) -> bool:
    """Whether an answer counts as the backend failing: a 5xx, a connection or stream that
    broke (a truncated body is one: httpx raises), or an OpenAI error event in a stream.
    A 4xx is the caller's; a stream without ``[DONE]`` that ended cleanly is not a
    failure (some engines omit it)."""
    return status >= 500 or broke or error_event


@dataclass(eq=False)
class Answer:
    """The backend's response and what holds it (the server's turn, the connection), open
    until :meth:`aclose` (or ``async with``). ``fleet`` is where the outcome goes (``None``:
    nowhere, for a relay tested on its own); ``cut_scope`` makes the scope a relay of it
    runs in (the router's: cut at a shutdown's drain deadline)."""

    server: LoadedServer | None
    upstream: httpx.Response
    resources: AsyncExitStack
    fleet: Fleet | None = None
    #: the scope a relay runs in: cut at a shutdown's drain deadline
    cut_scope: Callable[[], AbstractContextManager[anyio.CancelScope]] = anyio.CancelScope
    usage: Any = None  #: the answer's last ``usage``, counted when it closes
    outcome: bool | None = field(default=None, init=False)  #: failed, once it ended
    _closed: bool = field(default=False, init=False)

    def end(self, failed: bool) -> None:
        """How the answer ended (:func:`failed`); the first call holds. An answer closed
        without one (its client left, a shutdown cut it) feeds no outcome."""
        if self.outcome is None:
            self.outcome = failed

    async def death(self, within: float = STREAM_DEATH_WAIT_S) -> EngineExit | None:
        """After a transport error: how the backend died, if it did (see
        :meth:`Fleet.death`)."""
        if self.fleet is None or self.server is None:
            return None
        return await self.fleet.death(self.server, within)

    async def aclose(self) -> None:
        """Record usage and outcome (once), then release the response and the server."""
        if not self._closed:
            self._closed = True
            if self.fleet is not None and self.server is not None:
                self.fleet.count_usage(self.server.model.name, self.usage)
                if self.outcome is not None:
                    self.fleet.record_outcome(self.server, failed=self.outcome)
        await self.resources.aclose()

    async def __aenter__(self) -> Answer:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
