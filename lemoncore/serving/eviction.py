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
5. Auto-eviction (Lemonade's ``auto_evict``, :func:`auto_evict`), for servers that opt in
   (their own ``auto_evict`` option, else the global setting), never pinned or busy ones:
   one idle past its ``evict_idle_timeout`` goes; under memory pressure (the host's used
   memory at or over the threshold) the most disposable go first, by Lemonade's score
   ``idle seconds / (load seconds x evict_weight_factor)``, as many as the memory each
   reports covers the excess, one when the amounts are unknown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from lemoncore.durations import describe
from lemoncore.recipes import Device, ModelType, SlotPolicy

_UNCOUNTED = {SlotPolicy.UNMETERED, SlotPolicy.COEXIST_BY_TYPE}


@dataclass(frozen=True)
class Residency:
    """A server's auto-eviction options, Lemonade's per-load recipe options (defaults:
    ``common_defaults`` in Lemonade's src/cpp/server/recipe_options.cpp). ``auto_evict``
    ``None`` follows the global setting (:mod:`~lemoncore.serving.downsize` reads
    ``downsize_idle_timeout``)."""

    auto_evict: bool | None = None
    evict_idle_timeout: float = 300.0  # seconds idle before an auto-evicting server goes
    downsize_idle_timeout: float = 60.0  # seconds idle before one that can is downsized
    evict_weight_factor: float = 1.0  # higher: more protected under memory pressure


@dataclass(frozen=True)
class Memory:
    """The host's memory at one moment: ``used`` as a fraction of ``total_bytes``
    (``None``: a fraction given without amounts, as Lemonade's simulated pressure)."""

    used: float
    total_bytes: int | None = None


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
    memory_bytes: int | None = None  # what its process reports using (peak RSS), if known
    load_seconds: float = 1.0  # how long its start took: slow loads are costly to repeat
    residency: Residency = field(default_factory=Residency)
    can_downsize: bool = False  # its engine can give back what it holds while idle
    downsize_tried: bool = False  # since its last request (done or failed)

    def opted_in(self, default: bool) -> bool:
        """Whether auto-eviction applies to it: its own ``auto_evict``, else ``default``."""
        return default if self.residency.auto_evict is None else self.residency.auto_evict

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
    MEMORY = "memory_pressure"
    CAPACITY = "capacity"  # max_loaded_models lowered at run time
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


def score(resident: Resident, now: float) -> float:
    """How disposable ``resident`` is under memory pressure (higher goes first):
    Lemonade's ``idle_ms / (load_duration_ms * evict_weight_factor)``
    (EvictionEngine::evaluate_servers, src/cpp/server/eviction_engine.cpp); a factor that
    is not positive counts as 1, as there."""
    weight = resident.residency.evict_weight_factor
    weight = weight if weight > 0 else 1.0
    return max(0.0, now - resident.last_used) / (max(resident.load_seconds, 1e-3) * weight)


def auto_evict(
    residents: Sequence[Resident],
    now: float,
    default: bool,
    memory: Memory | None,
    threshold: float,
) -> Decision:
    """What auto-eviction removes now (Lemonade's EvictionEngine::evaluate_servers), among
    the servers that opt in (``residency.auto_evict``, else ``default``) and are neither
    pinned nor busy: the first idle past its ``evict_idle_timeout``; else, when
    ``memory`` is at or over ``threshold`` (a fraction), the most disposable by
    :func:`score` until the memory they report covers the excess, or one when an amount
    is unknown (the next evaluation measures again). ``memory`` ``None``: idle only."""
    opted = [r for r in residents if not r.pinned and not r.busy and r.opted_in(default)]
    for r in opted:
        if now - r.last_used >= r.residency.evict_idle_timeout:
            return Decision(
                evict=(
                    EvictionOrder(
                        r.name,
                        EvictionKind.IDLE,
                        f"idle for {now - r.last_used:.0f} s; its evict_idle_timeout is "
                        f"{describe(r.residency.evict_idle_timeout)}",
                    ),
                )
            )
    if memory is None or memory.used < threshold:
        return Decision()
    excess = None if memory.total_bytes is None else (memory.used - threshold) * memory.total_bytes
    evict: list[EvictionOrder] = []
    for r in sorted(opted, key=lambda r: score(r, now), reverse=True):
        evict.append(
            EvictionOrder(
                r.name,
                EvictionKind.MEMORY,
                f"memory is {memory.used:.0%} used (threshold {threshold:.0%}) and {r.name} "
                "is the most disposable (idle time / load time / evict_weight_factor)",
            )
        )
        if excess is None or r.memory_bytes is None:
            break
        excess -= r.memory_bytes
        if excess < 0:
            break
    return Decision(evict=tuple(evict))


def over_capacity(residents: Sequence[Resident], max_loaded: int) -> Decision:
    """What a lowered ``max_loaded`` evicts at once: per model type, the least recently
    used unpinned counted servers beyond it (idle ones first; busy ones are waited for).
    Pinned servers stay even when they alone exceed it: a later load is refused instead."""
    if max_loaded < 0:
        return Decision()
    evict: list[EvictionOrder] = []
    for model_type in {r.model_type for r in residents}:
        pool = [r for r in residents if r.model_type is model_type and r.policy not in _UNCOUNTED]
        candidates = sorted((r for r in pool if not r.pinned), key=lambda r: (r.busy, r.last_used))
        for r in candidates[: max(0, len(pool) - max_loaded)]:
            evict.append(
                EvictionOrder(
                    r.name,
                    EvictionKind.CAPACITY,
                    f"max_loaded_models is now {max_loaded} and {len(pool)} "
                    f"{model_type.value} servers are loaded; {r.name} is the least recently used",
                )
            )
    return Decision(evict=tuple(evict))
