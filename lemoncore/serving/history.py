"""What happened to each model since the server started: loads, unloads (with their
:class:`~lemoncore.serving.eviction.EvictionKind`), crashes and failed starts, newest
:data:`HISTORY_SIZE` kept (``GET /api/v1/events``, the web UI's Status tab), and crashes
counted per model (``lemon_backend_crashes_total``)."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass
from enum import StrEnum

from lemoncore.serving.eviction import EvictionKind

HISTORY_SIZE = 200


class ModelEventKind(StrEnum):
    LOADED = "loaded"
    UNLOADED = "unloaded"  # an eviction of any kind, an asked-for unload included
    CRASHED = "crashed"  # the engine ended on its own while loaded
    LOAD_FAILED = "load_failed"


@dataclass(frozen=True)
class ModelEvent:
    time: float  # seconds since the epoch
    model: str
    event: ModelEventKind
    reason: str  # one line
    kind: EvictionKind | None = None  # set for UNLOADED only


class History:
    """A bounded record of model events, oldest first, and crash counts."""

    def __init__(self, size: int = HISTORY_SIZE) -> None:
        self._events: deque[ModelEvent] = deque(maxlen=size)
        self.crashes: Counter[str] = Counter()

    def record(
        self,
        model: str,
        event: ModelEventKind,
        reason: str,
        kind: EvictionKind | None = None,
    ) -> None:
        reason = reason.splitlines()[0] if reason else ""
        self._events.append(ModelEvent(time.time(), model, event, reason, kind))
        if event is ModelEventKind.CRASHED:
            self.crashes[model] += 1

    def recent(self, limit: int) -> list[ModelEvent]:
        """The newest ``limit`` events, oldest first."""
        return list(self._events)[-limit:] if limit > 0 else []
