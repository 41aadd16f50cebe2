from __future__ import annotations

import pytest

from lemoncore.policy import Incoming, Resident, decide
from lemoncore.recipes import Device, ModelType, SlotPolicy

LLM, EMB = ModelType.LLM, ModelType.EMBEDDING


def resident(name: str, last_used: float, *, type_: ModelType = LLM, pinned: bool = False,
             busy: bool = False, policy: SlotPolicy = SlotPolicy.STANDARD) -> Resident:
    return Resident(name, type_, Device.CPU, False, policy, pinned, busy, last_used)


def incoming(name: str = "new", type_: ModelType = LLM,
             policy: SlotPolicy = SlotPolicy.STANDARD) -> Incoming:
    return Incoming(name, type_, Device.CPU, False, policy)


@pytest.mark.parametrize(
    ("residents", "new", "limit", "evicted"),
    [
        ([], incoming(), 1, []),
        ([resident("a", 1)], incoming(), 2, []),
        ([resident("a", 1)], incoming(), 1, ["a"]),
        ([resident("a", 2), resident("b", 1)], incoming(), 2, ["b"]),  # least recent
        ([resident("a", 1, busy=True), resident("b", 2)], incoming(), 2, ["b"]),  # idle first
        ([resident("a", 1, pinned=True), resident("b", 2)], incoming(), 2, ["b"]),
        ([resident("a", 1, type_=EMB)], incoming(), 1, []),  # other pool untouched
        ([resident("a", 1, policy=SlotPolicy.UNMETERED)], incoming(), 1, []),
        ([resident("a", 1)], incoming(policy=SlotPolicy.UNMETERED), 1, []),
        ([resident("a", 1), resident("b", 2)], incoming(), -1, []),  # unlimited
        ([resident("a", 1), resident("b", 2), resident("c", 3)], incoming(), 2, ["a", "b"]),
        ([resident("new", 1)], incoming("new"), 1, []),  # reload of itself
    ],
)
def test_decide_evicts_least_recently_used_unpinned(
    residents: list[Resident], new: Incoming, limit: int, evicted: list[str]
) -> None:
    decision = decide(residents, new, limit)
    assert decision.refused is None
    assert [e.name for e in decision.evict] == evicted
    assert all(e.reason.startswith("lru") for e in decision.evict)


def test_decide_refuses_when_every_slot_is_pinned() -> None:
    decision = decide([resident("a", 1, pinned=True), resident("b", 2, pinned=True)],
                      incoming(), 2)
    assert decision.evict == ()
    assert decision.refused is not None and "pinned" in decision.refused
