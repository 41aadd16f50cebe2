"""Who may use a server, and when: shutdown refusal and drain, each server's concurrency
gate and queue, the crash-loop cooldown, and wedge detection fed by every request's
outcome (streamed or not). Bookkeeping over plain state: no I/O, no eviction choices
(those are :mod:`lemoncore.serving.eviction`'s)."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import anyio
import structlog

from lemoncore.errors import LemonError
from lemoncore.exits import StartFailure
from lemoncore.serving.server import LoadedServer
from lemoncore.settings import Settings
from lemoncore.supervisor import StartError

log = structlog.get_logger("lemoncore.serving.admission")

# A backend that fails to start this many times in a row is held off, with a back-off
# doubling from COOLDOWN_S up to COOLDOWN_MAX_S, instead of being respawned per request.
# One that starting again cannot help (SIGILL, or the engine says so) is held off at once, for
# COOLDOWN_MAX_S: a client's automatic retries then get the explanation, not a new spawn.
CRASH_LOOP_FAILURES, COOLDOWN_S, COOLDOWN_MAX_S = 3, 5.0, 300.0
# Consecutive failed requests (5xx or broken connections) that mark a live server wedged.
WEDGED_AFTER = 3


class NotAdmitted(LemonError):
    """A request or load is not admitted now (503); ``retry_after`` says when to try
    again. Shutting down, a full queue, a crash-loop cooldown, a load still running."""

    status, type = 503, "server_busy"


@dataclass
class _Failures:
    count: int = 0
    held_until: float = 0.0
    error: str = ""  # the last failure's message, which a refusal repeats
    reason: str = ""  # its one line (StartError.reason)
    hopeless: bool = False  # trying again cannot help (StartFailure.HOPELESS)
    checkpoint: str = ""  # what failed: another model that later takes the name is not held


@dataclass(frozen=True)
class HeldOff:
    """A model whose starts are held off: the last failure in one line (``reason``), the
    failed starts in a row, and the seconds until a request may start it again (an
    explicit load may now)."""

    model: str
    reason: str
    failures: int
    retry_in_s: float


class Admission:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.closing = False  # a shutdown began: new requests are refused
        self.drain_deadline = math.inf
        self._begun: anyio.Event | None = None  # created by the first shutdown_begun()
        self._cuttable: set[anyio.CancelScope] = set()  # in-flight requests
        self._failed_starts: dict[str, _Failures] = {}

    # Shutdown ---------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """Refuse new requests (503) and give in-flight ones ``stop_grace`` seconds to
        finish; then their :meth:`cut_at_drain_deadline` scopes expire. Idempotent."""
        if self.closing:
            return
        self.closing, self.drain_deadline = True, anyio.current_time() + self.settings.stop_grace
        if self._begun is not None:
            self._begun.set()
        for scope in self._cuttable:
            scope.deadline = self.drain_deadline
        log.info(
            "shutting down: draining in-flight requests",
            in_flight=len(self._cuttable),
            deadline_s=self.settings.stop_grace,
        )

    async def shutdown_begun(self) -> None:
        """Return once a shutdown began, whoever began it (a signal, ``POST
        /api/v1/shutdown``)."""
        if not self.closing:
            self._begun = self._begun or anyio.Event()
            await self._begun.wait()

    def refuse_if_closing(self) -> None:
        if self.closing:
            raise NotAdmitted(
                "the server is shutting down; retry once it is back",
                503,
                "server_error",
                "shutting_down",
                retry_after=self.settings.stop_grace,
            )

    @contextmanager
    def cut_at_drain_deadline(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope that expires at a shutdown's drain deadline (never before one
        begins); check ``cancelled_caught`` to tell the client why it was cut."""
        with anyio.CancelScope(deadline=self.drain_deadline) as scope:
            self._cuttable.add(scope)
            try:
                yield scope
            finally:
                self._cuttable.discard(scope)

    # Each server's requests ---------------------------------------------------------------

    @staticmethod
    def hold(server: LoadedServer) -> None:
        """Count a request on ``server``: a busy server is never evicted (nor downsized):
        a downsize under way is cancelled, and one done is over."""
        server.downsized = server.downsize_tried = False
        if server.downsizing is not None:
            server.downsizing.cancel()
        if server.in_flight == 0:
            server.drained = anyio.Event()
        server.in_flight += 1

    @staticmethod
    def release(server: LoadedServer) -> None:
        server.in_flight -= 1
        server.last_used = time.monotonic()
        if server.in_flight == 0:
            server.drained.set()

    @asynccontextmanager
    async def turn(self, server: LoadedServer) -> AsyncIterator[None]:
        """Wait for one of the server's ``max_concurrency`` slots; beyond ``max_queue``
        waiting requests, refuse (503, ``Retry-After``)."""
        if server.gate is None:
            yield
            return
        if server.gate.value == 0 and server.queued >= self.settings.max_queue:
            raise NotAdmitted(
                f"{server.model.name} is busy: {server.queued} requests already "
                "wait for a free slot; retry shortly",
                code="queue_full",
                retry_after=1,
            )
        server.queued += 1
        try:
            await server.gate.acquire()
        finally:
            server.queued -= 1
        try:
            yield
        finally:
            server.gate.release()

    def wedged_after(self, server: LoadedServer, failed: bool) -> bool:
        """Count one request's outcome toward ``server.failures``, the consecutive failed
        requests (5xx, broken connections or streams) of a server that still looks alive
        (a success resets it); True when that makes it wedged (``WEDGED_AFTER``). Only
        counts: :meth:`~lemoncore.serving.fleet.Fleet.record_outcome` restarts it."""
        server.failures = server.failures + 1 if failed else 0
        return server.failures >= WEDGED_AFTER

    # Starts -----------------------------------------------------------------------------

    def check_cooldown(self, name: str, checkpoint: str) -> None:
        """Refuse a start of ``name`` while it is held off after failing, repeating the
        last failure (what failed, why, the fix); not when the name now means another
        ``checkpoint`` than the one that failed (an extra or user model over a catalogue
        one, or the other way round)."""
        failures = self._failed_starts.get(name, _Failures())
        if failures.checkpoint != checkpoint:
            return
        wait = failures.held_until - time.monotonic()
        if wait > 0:
            refused = NotAdmitted(
                f"{name} failed to start {_times(failures.count)}; lemoncore holds it off "
                f"for {wait:.0f} s more instead of respawning it per request (an explicit "
                f"load retries now: lemon load {name}, or POST /api/v1/load). The last "
                f"failure: {failures.error}",
                503,
                "model_load_error",
                "backend_cooldown",
                retry_after=wait,
            )
            if failures.hopeless:  # the clients' automatic retries cannot help either
                refused.should_retry = False
            raise refused

    def failed_start(self, name: str, exc: StartError, checkpoint: str) -> StartError:
        """Record a failed start of ``name`` (``checkpoint``: what it ran; the count starts
        again for another); the error to report (saying when it is held off). A start that
        cannot succeed by trying again (``exc.failure`` is ``hopeless``: its exit or the
        engine's own words say so) is held off at once, for the longest hold."""
        failures = self._failed_starts.get(name)
        if failures is None or failures.checkpoint != checkpoint:
            failures = self._failed_starts[name] = _Failures(checkpoint=checkpoint)
        failures.count += 1
        failures.error, failures.reason = str(exc), exc.reason
        hopeless = failures.hopeless = exc.failure is StartFailure.HOPELESS
        if failures.count < CRASH_LOOP_FAILURES and not hopeless:
            return exc
        hold = (
            COOLDOWN_MAX_S
            if hopeless
            else min(COOLDOWN_MAX_S, COOLDOWN_S * 2 ** (failures.count - CRASH_LOOP_FAILURES))
        )
        failures.held_until = time.monotonic() + hold
        why = (
            "starting it again cannot help"
            if hopeless
            else f"{name} failed to start {_times(failures.count)}"
        )
        return StartError(
            f"{exc}\n({why}: held off for {hold:.0f} s; an explicit load retries now)",
            exc.exit,
            exc.failure,
        )

    def started(self, name: str) -> None:
        self._failed_starts.pop(name, None)

    def held_off(self) -> list[HeldOff]:
        """The models held off now, and why."""
        now = time.monotonic()
        return [
            HeldOff(name, f.reason, f.count, round(f.held_until - now, 1))
            for name, f in sorted(self._failed_starts.items())
            if f.held_until > now
        ]


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times in a row"
