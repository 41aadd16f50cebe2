"""The eviction decision as tables over plain data: no processes, no clocks."""

from __future__ import annotations

import math

import pytest

from lemoncore.durations import describe, keep_alive_seconds
from lemoncore.recipes import Device, ModelType, SlotPolicy
from lemoncore.serving.eviction import Incoming, Resident, decide, idle, next_idle

LLM, EMB = ModelType.LLM, ModelType.EMBEDDING
STD, XGPU, XNPU, COEX, UNMET = (
    SlotPolicy.STANDARD,
    SlotPolicy.EXCLUSIVE_GPU,
    SlotPolicy.EXCLUSIVE_NPU,
    SlotPolicy.COEXIST_BY_TYPE,
    SlotPolicy.UNMETERED,
)
# (device, is_amd_gpu) of typical servers
CPU, AMD, NVIDIA, NPU = (
    (Device.CPU, False),
    (Device.GPU, True),
    (Device.GPU, False),
    (Device.NPU, False),
)


def resident(
    name: str,
    last_used: float = 0,
    *,
    on: tuple[Device, bool] = CPU,
    type_: ModelType = LLM,
    policy: SlotPolicy = STD,
    pinned: bool = False,
    busy: bool = False,
    keep_alive: float = math.inf,
    answered: bool = True,
) -> Resident:
    return Resident(
        name, type_, on[0], on[1], policy, pinned, busy, last_used, keep_alive, answered=answered
    )


def incoming(
    name: str = "new",
    *,
    on: tuple[Device, bool] = CPU,
    type_: ModelType = LLM,
    policy: SlotPolicy = STD,
) -> Incoming:
    return Incoming(name, type_, on[0], on[1], policy)


@pytest.mark.parametrize(
    ("residents", "new", "limit", "evicted"),
    [
        ([], incoming(), 1, []),
        ([resident("a", 1)], incoming(), 2, []),
        ([resident("a", 1)], incoming(), 1, ["a"]),
        ([resident("a", 2), resident("b", 1)], incoming(), 2, ["b"]),  # least recent
        ([resident("a", 1, busy=True), resident("b", 2)], incoming(), 2, ["b"]),  # idle first
        ([resident("a", 1, busy=True)], incoming(), 1, ["a"]),  # busy: waited for, not kept
        ([resident("a", 1, pinned=True), resident("b", 2)], incoming(), 2, ["b"]),
        ([resident("a", 1, type_=EMB)], incoming(), 1, []),  # other pool untouched
        ([resident("a", 1, policy=UNMET)], incoming(), 1, []),
        ([resident("a", 1)], incoming(policy=UNMET), 1, []),
        ([resident("a", 1), resident("b", 2)], incoming(), -1, []),  # unlimited
        ([resident("a", 1), resident("b", 2), resident("c", 3)], incoming(), 2, ["a", "b"]),
        ([resident("new", 1)], incoming("new"), 1, []),  # reload of itself
    ],
)
def test_lru_capacity_per_model_type(
    residents: list[Resident], new: Incoming, limit: int, evicted: list[str]
) -> None:
    decision = decide(residents, new, limit)
    assert decision.refused is None
    assert [e.name for e in decision.evict] == evicted
    assert all(e.kind == "lru" for e in decision.evict)


@pytest.mark.parametrize(
    ("residents", "new", "evicted", "kind"),
    [
        # exclusive_gpu (VTE) arriving: every AMD-GPU server goes, others stay
        (
            [
                resident("rocm", on=AMD),
                resident("cpu"),
                resident("cuda", on=NVIDIA),
                resident("emb-rocm", on=AMD, type_=EMB),
            ],
            incoming("vte", on=AMD, policy=XGPU),
            ["rocm", "emb-rocm"],
            "exclusive_gpu",
        ),
        # any AMD-GPU server arriving evicts VTE
        (
            [resident("vte", on=AMD, policy=XGPU), resident("cpu")],
            incoming("rocm", on=AMD),
            ["vte"],
            "exclusive_gpu",
        ),
        (
            [resident("vte", on=AMD, policy=XGPU)],
            incoming("emb", on=AMD, type_=EMB),
            ["vte"],
            "exclusive_gpu",
        ),
        # CPU and other vendors coexist with VTE, both orders
        ([resident("vte", on=AMD, policy=XGPU)], incoming("cpu"), [], ""),
        ([resident("cpu")], incoming("vte", on=AMD, policy=XGPU), [], ""),
        ([resident("vte", on=AMD, policy=XGPU)], incoming("cuda", on=NVIDIA), [], ""),
        ([resident("cuda", on=NVIDIA)], incoming("vte", on=AMD, policy=XGPU), [], ""),
        # a second exclusive server replaces the first
        (
            [resident("vte1", on=AMD, policy=XGPU)],
            incoming("vte2", on=AMD, policy=XGPU),
            ["vte1"],
            "exclusive_gpu",
        ),
        # exclusive_npu, both directions; GPU servers untouched
        (
            [resident("npu1", on=NPU), resident("rocm", on=AMD)],
            incoming("ryzenai", on=NPU, policy=XNPU),
            ["npu1"],
            "exclusive_npu",
        ),
        (
            [resident("ryzenai", on=NPU, policy=XNPU)],
            incoming("whisper-npu", on=NPU),
            ["ryzenai"],
            "exclusive_npu",
        ),
        # coexist_by_type: one per model type...
        (
            [
                resident("flm-llm", on=NPU, policy=COEX),
                resident("flm-emb", on=NPU, policy=COEX, type_=EMB),
            ],
            incoming("flm2", on=NPU, policy=COEX),
            ["flm-llm"],
            "coexist_by_type",
        ),
        # ...and no exclusive NPU server beside it (which any NPU arrival evicts)
        (
            [resident("ryzenai", on=NPU, policy=XNPU)],
            incoming("flm", on=NPU, policy=COEX),
            ["ryzenai"],
            "exclusive_npu",
        ),
        # unmetered servers are never evicted, even by exclusivity
        ([resident("cloud", on=AMD, policy=UNMET)], incoming("vte", on=AMD, policy=XGPU), [], ""),
    ],
)
def test_exclusivity(
    residents: list[Resident], new: Incoming, evicted: list[str], kind: str
) -> None:
    decision = decide(residents, new, -1)
    assert decision.refused is None
    assert sorted(e.name for e in decision.evict) == sorted(evicted)
    assert all(e.kind == kind and new.name in e.reason for e in decision.evict)


def test_exclusivity_evictions_free_slots_before_lru() -> None:
    residents = [resident("rocm", 1, on=AMD), resident("cpu", 2)]
    decision = decide(residents, incoming("vte", on=AMD, policy=XGPU), 2)
    assert [(e.name, e.kind) for e in decision.evict] == [("rocm", "exclusive_gpu")]


def test_pinned_models_block_instead_of_being_evicted() -> None:
    lru = decide([resident("a", 1, pinned=True), resident("b", 2, pinned=True)], incoming(), 2)
    assert lru.evict == () and lru.refused is not None and "pinned" in lru.refused
    exclusive = decide(
        [resident("rocm", on=AMD, pinned=True)], incoming("vte", on=AMD, policy=XGPU), 4
    )
    assert exclusive.evict == ()
    assert exclusive.refused is not None
    assert "rocm is pinned" in exclusive.refused and "AMD GPU" in exclusive.refused


@pytest.mark.parametrize(
    ("residents", "now", "unloaded", "next_at"),
    [
        ([resident("a", 10)], 1e9, [], None),  # keep_alive forever (the default)
        ([resident("a", 10, keep_alive=5)], 14.9, [], 15),
        ([resident("a", 10, keep_alive=5)], 15, ["a"], 15),
        ([resident("a", 10, keep_alive=0)], 10, ["a"], 10),  # 0: as its last request ends
        ([resident("a", 10, keep_alive=0, answered=False)], 99, [], None),  # not used yet
        ([resident("a", 10, keep_alive=5, busy=True)], 100, [], None),  # never while busy
        ([resident("a", 10, keep_alive=5, pinned=True)], 100, [], None),  # nor pinned
        ([resident("a", 10, keep_alive=5), resident("b", 0, keep_alive=30)], 16, ["a"], 15),
        ([resident("a", 10, keep_alive=5), resident("b", 0, keep_alive=3)], 16, ["a", "b"], 3),
    ],
)
def test_idle_servers_are_unloaded_after_their_keep_alive(
    residents: list[Resident], now: float, unloaded: list[str], next_at: float | None
) -> None:
    decision = idle(residents, now)
    assert [e.name for e in decision.evict] == unloaded
    assert {e.kind for e in decision.evict} <= {"idle"}
    assert next_idle(residents) == next_at


def test_an_idle_eviction_says_how_long_and_why() -> None:
    [why] = idle([resident("a", 0, keep_alive=300)], 301).evict
    assert why.reason == "idle for 301 s; its keep_alive is 5 min"


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (None, None),
        ("", None),
        (0, 0.0),
        ("0", 0.0),
        (300, 300.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("-1", math.inf),
        (-1, math.inf),
        ("-5m", math.inf),
    ],
)
def test_keep_alive_durations(given: object, seconds: float | None) -> None:
    assert keep_alive_seconds(given) == seconds


@pytest.mark.parametrize("given", ["soon", "5 m", "m", True, [1], "nan", float("nan")])
def test_keep_alive_refuses_what_is_no_duration(given: object) -> None:
    with pytest.raises(ValueError, match=r"duration|number of seconds"):
        keep_alive_seconds(given)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (math.inf, "forever"),
        (0, "0 s"),
        (90, "90 s"),
        (300, "5 min"),
        (150, "150 s"),
        (7200, "2 h"),
        (5400, "90 min"),
    ],
)
def test_keep_alive_for_people(seconds: float, text: str) -> None:
    assert describe(seconds) == text
