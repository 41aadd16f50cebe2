"""What to evict before a load: one pure function over plain data.

The router gathers the loaded servers and the incoming load, calls :func:`decide`, and
executes the answer; it never makes an eviction choice of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lemoncore.recipes import Device, ModelType, SlotPolicy


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


@dataclass(frozen=True)
class Incoming:
    name: str
    model_type: ModelType
    device: Device
    is_amd_gpu: bool
    policy: SlotPolicy


@dataclass(frozen=True)
class Eviction:
    name: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """Evictions to perform, in order, or the reason the load cannot proceed."""

    evict: tuple[Eviction, ...] = ()
    refused: str | None = None


def decide(residents: Sequence[Resident], incoming: Incoming, max_loaded: int) -> Decision:
    """Make room for ``incoming`` among ``residents``.

    ``max_loaded`` is the per-model-type slot count (``-1`` = unlimited). Pinned and
    unmetered servers are never chosen; idle servers go before busy ones (the router waits
    for a busy server to drain, it never kills it), least recently used first.
    """
    others = [r for r in residents if r.name != incoming.name]
    if incoming.policy is SlotPolicy.UNMETERED or max_loaded < 0:
        return Decision()
    pool = [r for r in others
            if r.model_type is incoming.model_type and r.policy is not SlotPolicy.UNMETERED]
    excess = len(pool) + 1 - max_loaded
    if excess <= 0:
        return Decision()
    candidates = sorted((r for r in pool if not r.pinned), key=lambda r: (r.busy, r.last_used))
    if len(candidates) < excess:
        return Decision(refused=(
            f"all {len(pool)} {incoming.model_type.value} slots hold pinned models; unload or "
            f"unpin one, or raise max_loaded_models (now {max_loaded})"))
    return Decision(evict=tuple(
        Eviction(r.name, f"lru: {incoming.model_type.value} slots full "
                         f"({len(pool)}/{max_loaded}), least recently used")
        for r in candidates[:excess]))
