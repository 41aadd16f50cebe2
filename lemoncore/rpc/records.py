"""The state records of ``lemon worker``: while it runs, a worker records itself in
``<cache_dir>/run/worker-<port>.json`` (rewritten on every state change, :func:`recording`);
:func:`read_worker_states` reads those records for ``lemon ps`` and ``lemon status``, and
:func:`describe` puts one on a line.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol, TypedDict, Unpack


class WorkerUpdate(TypedDict, total=False):
    """What a state change records: ``state`` (``starting``, ``ready``, ``restarting``,
    ``stopped``) and the facts behind it; ``backoff_s`` and ``next_start_at`` only while
    restarting."""

    state: str
    rpc_server_pid: int | None
    version: str
    restarts: int
    last_exit: int | None
    last_error: str | None
    backoff_s: float
    next_start_at: float  # epoch seconds


class WorkerState(WorkerUpdate):
    """A worker's record: the ``lemon worker`` process (``pid``), where it serves, the
    binary, when it started (epoch seconds), and its latest :class:`WorkerUpdate`."""

    pid: int
    endpoint: str
    host: str
    port: int
    binary: str
    started: float
    cache: str | None
    device: str | None


class Record(Protocol):
    """``record(**fields)``: merge ``fields`` into the worker's record and rewrite it."""

    def __call__(self, **fields: Unpack[WorkerUpdate]) -> None: ...


def state_file(cache_dir: Path, port: int) -> Path:
    return cache_dir / "run" / f"worker-{port}.json"


def read_worker_states(cache_dir: Path) -> list[WorkerState]:
    """The workers recorded on this machine, by port, as their files hold them. A record
    whose process is gone is removed and not returned."""
    import psutil

    states: list[WorkerState] = []
    for path in sorted((cache_dir / "run").glob("worker-*.json")):
        try:
            state: WorkerState = json.loads(path.read_text())
            alive = psutil.pid_exists(int(state["pid"]))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError):
            alive = False
        if not alive:
            path.unlink(missing_ok=True)
            continue
        states.append(state)
    return sorted(states, key=lambda s: int(s.get("port", 0)))


def describe(state: WorkerState) -> str:
    """One line for a worker record, e.g. ``worker 10.0.0.2:50052 ready (rpc-server
    v7.0.0, pid 123, 0 restarts)``."""
    text = f"worker {state.get('endpoint')} {state.get('state')}"
    facts = [
        f"rpc-server v{state['version']}" if state.get("version") else "",
        f"pid {state['rpc_server_pid']}" if state.get("rpc_server_pid") else "",
        f"{state.get('restarts', 0)} restarts",
    ]
    if state.get("state") == "restarting" and state.get("backoff_s") is not None:
        facts.append(f"next start in {state['backoff_s']:g} s")
    return f"{text} ({', '.join(f for f in facts if f)})"


@contextlib.contextmanager
def recording(path: Path, base: Mapping[str, object]) -> Iterator[Record]:
    """A ``record(**fields)`` that rewrites ``path`` with ``base`` (a
    :class:`WorkerState`'s fixed facts) plus every field given so far; the file is removed
    when the block ends (if it is still this process's)."""
    from lemoncore.jsonfile import write_json

    current = dict(base)

    def record(**fields: Unpack[WorkerUpdate]) -> None:
        current.update(fields)
        if fields.get("state") != "restarting":
            current.pop("backoff_s", None)
            current.pop("next_start_at", None)
        write_json(path, current)

    try:
        yield record
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()
