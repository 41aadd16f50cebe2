"""What to evict before a load: one pure function over plain data.

The router gathers the loaded servers and the incoming load, calls :func:`decide` (or,
after a failed start, :func:`after_failed_start`; for a wedged server, :func:`wedged`;
for servers left idle, :func:`idle`), and executes the answer; it never makes an eviction
choice of its own.

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
        if self.pinned or self.busy or math.isinf(self.keep_alive) or \
                (self.keep_alive == 0 and not self.answered):
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


@dataclass(frozen=True)
class Eviction:
    """``kind`` is a stable label (metrics); ``reason`` is a sentence for people."""

    name: str
    kind: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """Evictions to perform, in order, or the reason the load cannot proceed."""

    evict: tuple[Eviction, ...] = ()
    refused: str | None = None


def conflict(resident: Resident, incoming: Incoming) -> Eviction | None:
    """Why ``resident`` cannot stay beside ``incoming``, if it cannot."""
    r, i = resident, incoming
    if shared := [w for w in i.workers if w in r.workers]:
        return Eviction(r.name, "worker_busy", f"{i.name} needs the RPC worker "
                        f"{', '.join(shared)} and {r.name} holds it")
    if r.policy is SlotPolicy.UNMETERED or i.policy is SlotPolicy.UNMETERED:
        return None
    if i.policy is SlotPolicy.EXCLUSIVE_GPU and r.is_amd_gpu:
        return Eviction(r.name, "exclusive_gpu",
                        f"{i.name} needs the AMD GPU to itself and {r.name} is on it")
    if r.policy is SlotPolicy.EXCLUSIVE_GPU and i.is_amd_gpu:
        return Eviction(r.name, "exclusive_gpu",
                        f"{r.name} holds the AMD GPU exclusively and {i.name} needs it")
    if i.policy is SlotPolicy.EXCLUSIVE_NPU and r.device is Device.NPU:
        return Eviction(r.name, "exclusive_npu",
                        f"{i.name} needs the NPU to itself and {r.name} is on it")
    if r.policy is SlotPolicy.EXCLUSIVE_NPU and i.device is Device.NPU:
        return Eviction(r.name, "exclusive_npu",
                        f"{r.name} holds the NPU exclusively and {i.name} needs it")
    if (i.policy is SlotPolicy.COEXIST_BY_TYPE and r.policy is SlotPolicy.COEXIST_BY_TYPE
            and r.model_type is i.model_type):
        return Eviction(r.name, "coexist_by_type",
                        f"{i.name} allows one {i.model_type.value} server of its kind and "
                        f"{r.name} is one")
    return None


def decide(residents: Sequence[Resident], incoming: Incoming, max_loaded: int) -> Decision:
    """Make room for ``incoming`` among ``residents`` (``max_loaded`` -1 = unlimited)."""
    decision = _make_room(residents, incoming, max_loaded)
    if decision.refused or not incoming.reload or \
            not any(r.name == incoming.name for r in residents):
        return decision
    return Decision(evict=(Eviction(incoming.name, "reload",
                                    "reload with new options or backend"), *decision.evict))


def after_failed_start(residents: Sequence[Resident], incoming: Incoming) -> Decision:
    """A start that failed for want of memory gets one retry: every other unpinned
    server goes first (busy ones are waited for)."""
    return Decision(evict=tuple(
        Eviction(r.name, "load_failure", f"loading {incoming.name} failed; freeing memory "
                                         "to retry")
        for r in residents if r.name != incoming.name and not r.pinned))


def wedged(resident: Resident, failures: int) -> Decision:
    """A server whose requests keep failing while its process looks alive is restarted,
    pinned or not: the next request gets a fresh process."""
    return Decision(evict=(Eviction(resident.name, "wedged", f"{failures} consecutive "
                                    "failed requests while its health was fine"),))


def idle(residents: Sequence[Resident], now: float) -> Decision:
    """Unload what has been idle past its ``keep_alive`` (``now`` on ``last_used``'s
    clock); busy and pinned servers stay."""
    return Decision(evict=tuple(
        Eviction(r.name, "idle", f"idle for {now - r.last_used:.0f} s; its keep_alive is "
                                 f"{describe(r.keep_alive)}")
        for r in residents if (until := r.idle_until()) is not None and until <= now))


def next_idle(residents: Sequence[Resident]) -> float | None:
    """When the next server will have been idle past its ``keep_alive``, if any will."""
    return min((u for r in residents if (u := r.idle_until()) is not None), default=None)


def _make_room(residents: Sequence[Resident], incoming: Incoming,
               max_loaded: int) -> Decision:
    others = [r for r in residents if r.name != incoming.name]
    forced = [e for r in others if (e := conflict(r, incoming)) is not None]
    pinned = {r.name for r in others if r.pinned}
    blocked = [e for e in forced if e.name in pinned]
    if blocked:
        return Decision(refused="; ".join(
            f"{e.reason}, but {e.name} is pinned" for e in blocked) + ": unpin or unload it")
    evict = {e.name: e for e in forced}
    if incoming.policy in _UNCOUNTED or max_loaded < 0:
        return Decision(evict=tuple(evict.values()))
    pool = [r for r in others if r.name not in evict and r.policy not in _UNCOUNTED
            and r.model_type is incoming.model_type]
    excess = len(pool) + 1 - max_loaded
    candidates = sorted((r for r in pool if not r.pinned), key=lambda r: (r.busy, r.last_used))
    if excess > len(candidates):
        return Decision(refused=(
            f"all {len(pool)} {incoming.model_type.value} slots hold pinned models; unload or "
            f"unpin one, or raise max_loaded_models (now {max_loaded})"))
    for r in candidates[:max(excess, 0)]:
        evict[r.name] = Eviction(r.name, "lru", (
            f"{incoming.model_type.value} slots are full ({len(pool)}/{max_loaded}) and "
            f"{r.name} is the least recently used{' (busy: waits for it)' if r.busy else ''}"))
    return Decision(evict=tuple(evict.values()))
