"""What to evict before a load: one pure function over plain data.

The router gathers the loaded servers and the incoming load, calls :func:`decide` (or,
after a failed start, :func:`after_failed_start`; for a wedged server, :func:`wedged`;
for servers left idle, :func:`idle`, through :mod:`~lemoncore.serving.idle`), and
executes the answer; it never makes an eviction choice of its own. Each
:class:`EvictionOrder` names its :class:`EvictionKind` (a ``StrEnum``: logs, ``/metrics``
and ``dry_run`` replies show the plain strings).

Rules, in order:

1. Exclusivity. ``exclusive_gpu``: loading it evicts every server on an AMD GPU, and
   loading any AMD-GPU server evicts it; CPU servers and other vendors' GPUs coexist.
   ``exclusive_npu``: the same for NPU servers. ``coexist_by_type``: one such server per
   model type (a new one replaces the old). ``workers``: two servers never share a
   llama.cpp RPC worker (it serves one client at a time).
2. Capacity. Every policy but ``unmetered`` and ``coexist_by_type`` counts toward
   ``max_loaded`` servers per model type; when full, the least recently used idle server
   goes first, busy ones after (the router waits for them to drain; it never kills them).
3. ``unmetered`` servers are never evicted; pinned servers are never evicted, and a load
   that needs a pinned server gone is refused.
4. Idleness. A server idle (no request in flight or queued) for longer than its
   ``keep_alive`` is unloaded, unless it is pinned; ``keep_alive`` 0 unloads it as soon
   as a request ends (a server loaded but not used yet waits for its first), ``math.inf``
   never.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from lemoncore.durations import describe
from lemoncore.recipes import Device, ModelType, SlotPolicy

_UNCOUNTED = {SlotPolicy.UNMETERED, SlotPolicy.COEXIST_BY_TYPE}


@dataclass(frozen=True)
class Resident:
    """A loaded server as the policy sees it."""

    name: str
    model_type: ModelType
    device: Device
    is_amd_gpu: bool
    policy: SlotPolicy
    pinned: bool
    busy: bool
    last_used: float
    keep_alive: float = math.inf  # seconds idle before it is unloaded
    workers: tuple[str, ...] = ()  # RPC workers it holds (host:port)
    answered: bool = True  # it has served a request since it was loaded

    def idle_until(self) -> float | None:
        """When it is unloaded for idleness (``last_used``'s clock), if it ever is."""
        if (
            self.pinned
            or self.busy
            or math.isinf(self.keep_alive)
            or (self.keep_alive == 0 and not self.answered)
        ):
            return None
        return self.last_used + self.keep_alive


@dataclass(frozen=True)
class Incoming:
    """The load to make room for; ``reload`` replaces a resident of the same name (new
    options or backend)."""

    name: str
    model_type: ModelType
    device: Device
    is_amd_gpu: bool
    policy: SlotPolicy
    reload: bool = False
    workers: tuple[str, ...] = ()  # RPC workers it needs (host:port)


class EvictionKind(StrEnum):
    """Why a server is stopped: a stable label (the ``reason`` of
    ``lemon_evictions_total``, ``kind`` in a ``dry_run``'s evictions, the log's ``kind``)."""

    LRU = "lru"
    EXCLUSIVE_GPU = "exclusive_gpu"
    EXCLUSIVE_NPU = "exclusive_npu"
    COEXIST_BY_TYPE = "coexist_by_type"
    RELOAD = "reload"
    LOAD_FAILURE = "load_failure"
    WEDGED = "wedged"
    IDLE = "idle"
    WORKER_BUSY = "worker_busy"
    UNLOAD = "unload"  # asked for (an unload, unload all, or the shutdown)


@dataclass(frozen=True)
class EvictionOrder:
    """Stop server ``name``: ``kind`` is the stable label; ``reason`` a sentence for people."""

    name: str
    kind: EvictionKind
    reason: str


@dataclass(frozen=True)
class Decision:
    """Evictions to perform, in order, or the reason the load cannot proceed."""

    evict: tuple[EvictionOrder, ...] = ()
    refused: str | None = None


def conflict(resident: Resident, incoming: Incoming) -> EvictionOrder | None:
    """Why ``resident`` cannot stay beside ``incoming``, if it cannot."""
    r, i, kind = resident, incoming, EvictionKind
    if shared := [w for w in i.workers if w in r.workers]:
        return EvictionOrder(
            r.name,
            kind.WORKER_BUSY,
            f"{i.name} needs the RPC worker {', '.join(shared)} and {r.name} holds it",
        )
    if r.policy is SlotPolicy.UNMETERED or i.policy is SlotPolicy.UNMETERED:
        return None
    if i.policy is SlotPolicy.EXCLUSIVE_GPU and r.is_amd_gpu:
        return EvictionOrder(
            r.name,
            kind.EXCLUSIVE_GPU,
            f"{i.name} needs the AMD GPU to itself and {r.name} is on it",
        )
    if r.policy is SlotPolicy.EXCLUSIVE_GPU and i.is_amd_gpu:
        return EvictionOrder(
            r.name,
            kind.EXCLUSIVE_GPU,
            f"{r.name} holds the AMD GPU exclusively and {i.name} needs it",
        )
    if i.policy is SlotPolicy.EXCLUSIVE_NPU and r.device is Device.NPU:
        return EvictionOrder(
            r.name, kind.EXCLUSIVE_NPU, f"{i.name} needs the NPU to itself and {r.name} is on it"
        )
    if r.policy is SlotPolicy.EXCLUSIVE_NPU and i.device is Device.NPU:
        return EvictionOrder(
            r.name, kind.EXCLUSIVE_NPU, f"{r.name} holds the NPU exclusively and {i.name} needs it"
        )
    if (
        i.policy is SlotPolicy.COEXIST_BY_TYPE
        and r.policy is SlotPolicy.COEXIST_BY_TYPE
        and r.model_type is i.model_type
    ):
        return EvictionOrder(
            r.name,
            kind.COEXIST_BY_TYPE,
            f"{i.name} allows one {i.model_type.value} server of its kind and {r.name} is one",
        )
    return None


def decide(residents: Sequence[Resident], incoming: Incoming, max_loaded: int) -> Decision:
    """Make room for ``incoming`` among ``residents`` (``max_loaded`` -1 = unlimited)."""
    decision = _make_room(residents, incoming, max_loaded)
    if (
        decision.refused
        or not incoming.reload
        or not any(r.name == incoming.name for r in residents)
    ):
        return decision
    return Decision(
        evict=(
            EvictionOrder(incoming.name, EvictionKind.RELOAD, "reload with new options or backend"),
            *decision.evict,
        )
    )


def after_failed_start(
    residents: Sequence[Resident], incoming: Incoming, out_of_memory: bool
) -> Decision:
    """A start that failed for want of memory (``out_of_memory``) gets one retry: every
    other unpinned server goes first (busy ones are waited for). No retry (an empty
    decision) for any other failure, when nothing could be freed, or for a load on RPC
    workers (a worker that failed is not a want of local memory)."""
    if not out_of_memory or incoming.workers:
        return Decision()
    return Decision(
        evict=tuple(
            EvictionOrder(
                r.name,
                EvictionKind.LOAD_FAILURE,
                f"loading {incoming.name} failed; freeing memory to retry",
            )
            for r in residents
            if r.name != incoming.name and not r.pinned
        )
    )


def wedged(resident: Resident, failures: int) -> Decision:
    """A server whose requests keep failing while its process looks alive is restarted,
    pinned or not: the next request gets a fresh process."""
    return Decision(
        evict=(
            EvictionOrder(
                resident.name,
                EvictionKind.WEDGED,
                f"{failures} consecutive failed requests while its health was fine",
            ),
        )
    )


def idle(residents: Sequence[Resident], now: float) -> Decision:
    """Unload what has been idle past its ``keep_alive`` (``now`` on ``last_used``'s
    clock); busy and pinned servers stay."""
    return Decision(
        evict=tuple(
            EvictionOrder(
                r.name,
                EvictionKind.IDLE,
                f"idle for {now - r.last_used:.0f} s; its keep_alive is {describe(r.keep_alive)}",
            )
            for r in residents
            if (until := r.idle_until()) is not None and until <= now
        )
    )


def next_idle(residents: Sequence[Resident]) -> float | None:
    """When the next server will have been idle past its ``keep_alive``, if any will."""
    return min((u for r in residents if (u := r.idle_until()) is not None), default=None)


def _make_room(residents: Sequence[Resident], incoming: Incoming, max_loaded: int) -> Decision:
    others = [r for r in residents if r.name != incoming.name]
    forced = [e for r in others if (e := conflict(r, incoming)) is not None]
    pinned = {r.name for r in others if r.pinned}
    blocked = [e for e in forced if e.name in pinned]
    if blocked:
        return Decision(
            refused="; ".join(f"{e.reason}, but {e.name} is pinned" for e in blocked)
            + ": unpin or unload it"
        )
    evict = {e.name: e for e in forced}
    if incoming.policy in _UNCOUNTED or max_loaded < 0:
        return Decision(evict=tuple(evict.values()))
    pool = [
        r
        for r in others
        if r.name not in evict
        and r.policy not in _UNCOUNTED
        and r.model_type is incoming.model_type
    ]
    excess = len(pool) + 1 - max_loaded
    candidates = sorted((r for r in pool if not r.pinned), key=lambda r: (r.busy, r.last_used))
    if excess > len(candidates):
        return Decision(
            refused=(
                f"all {len(pool)} {incoming.model_type.value} slots hold pinned models; unload or "
                f"unpin one, or raise max_loaded_models (now {max_loaded})"
            )
        )
    for r in candidates[: max(excess, 0)]:
        evict[r.name] = EvictionOrder(
            r.name,
            EvictionKind.LRU,
            (
                f"{incoming.model_type.value} slots are full ({len(pool)}/{max_loaded}) and "
                f"{r.name} is the least recently used{' (busy: waits for it)' if r.busy else ''}"
            ),
        )
    return Decision(evict=tuple(evict.values()))
