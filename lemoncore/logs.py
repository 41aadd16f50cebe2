"""structlog configuration: console or JSON lines on stderr, and a copy of the recent
lines in memory (:data:`RECENT`) for ``GET /api/v1/logs`` and the web UI.

The copy holds what stderr shows (the same lines, rendered without colour), so it holds
no more than the log does: the loggers never log secrets. Backend output (``source=
backend``) and lemoncore's own lines are kept in separate rings, so a chatty engine does
not push lemoncore's events (loads, evictions, refusals) out of the copy.
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
from collections import deque
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

import structlog

RING_SIZE = 2000  # lines kept per ring (backend output; lemoncore's own)
_OWN_KEYS = frozenset({"timestamp", "level", "event", "model", "source"})


@dataclass(frozen=True)
class LogLine:
    seq: int  # increases by one per line, across both rings
    time: str
    level: str
    event: str
    model: str | None  # the model a line is about (backend output carries it)
    source: str  # "backend" (an engine's output) or "lemoncore"
    line: str  # as printed on stderr, without colour
    fields: dict[str, str]  # the event's other scalar values, as text (as in ``line``)


class RecentLines:
    """Two bounded rings of recent lines; thread-safe (loggers run in worker threads)."""

    def __init__(self, size: int = RING_SIZE) -> None:
        self._rings: dict[bool, deque[LogLine]] = {
            True: deque(maxlen=size),
            False: deque(maxlen=size),
        }
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self.newest = 0  # the seq of the newest line
        self.capturing = False  # configure_logging installed the tee: new lines arrive

    def add(self, event: MutableMapping[str, Any], line: str) -> None:
        model = event.get("model")
        source = str(event.get("source") or "lemoncore")
        with self._lock:
            self.newest = next(self._seq)
            self._rings[source == "backend"].append(
                LogLine(
                    self.newest,
                    str(event.get("timestamp", "")),
                    str(event.get("level", "")),
                    str(event.get("event", "")),
                    None if model is None else str(model),
                    source,
                    line,
                    {
                        k: str(v)
                        for k, v in event.items()
                        if k not in _OWN_KEYS and isinstance(v, str | int | float | bool)
                    },
                )
            )

    def since(
        self,
        after: int = 0,
        model: str | None = None,
        limit: int = RING_SIZE,
        event: str | None = None,
    ) -> list[LogLine]:
        """Lines after ``after`` (a ``seq``), oldest first, about ``model`` and of
        ``event`` if given; the newest ``limit`` of them."""
        with self._lock:
            lines = [*self._rings[True], *self._rings[False]]
        lines = sorted(
            (x for x in lines if x.seq > after and matches(x, model, event)), key=lambda x: x.seq
        )
        return lines[-limit:] if limit > 0 else []

    def clear(self) -> None:
        with self._lock:
            for ring in self._rings.values():
                ring.clear()


def matches(line: LogLine, model: str | None, event: str | None) -> bool:
    return (model is None or line.model == model) and (event is None or line.event == event)


RECENT = RecentLines()


class _Tee:
    """A processor just before the renderer: copies each event, rendered plain, into
    :data:`RECENT`, and passes the event on unchanged."""

    def __init__(self, plain: structlog.types.Processor) -> None:
        self.plain = plain

    def __call__(
        self, logger: Any, name: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        try:
            line = self.plain(logger, name, dict(event))  # renderers may pop keys
            RECENT.add(event, line if isinstance(line, str) else str(line))
        except Exception:  # noqa: BLE001, S110 - the copy must never break logging
            pass
        return event


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    colors = fmt != "json" and sys.stderr.isatty()

    def console(colors: bool) -> structlog.types.Processor:
        # Plain tracebacks: rich's would print local variables, which can hold secrets.
        return structlog.dev.ConsoleRenderer(
            colors=colors, exception_formatter=structlog.dev.plain_traceback
        )

    renderer = structlog.processors.JSONRenderer() if fmt == "json" else console(colors)
    plain = console(False) if colors else renderer
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *([structlog.processors.format_exc_info] if fmt == "json" else []),
            _Tee(plain),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    RECENT.capturing = True
