"""Auto-eviction as a pure decision over data (Lemonade's EvictionEngine::evaluate_servers
semantics): opt-in, pinned and busy servers stay, idleness past evict_idle_timeout, memory
pressure by score (idle / load time / evict_weight_factor) covered by the memory each
server reports; and what a lowered max_loaded_models evicts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lemoncore.recipes import Device, ModelType, SlotPolicy
from lemoncore.serving.eviction import (
    EvictionKind,
    Memory,
    Residency,
    Resident,
    auto_evict,
    over_capacity,
    score,
)

NOW = 1000.0
GIB = 1 << 30


def r(
    name: str,
    idle: float = 10.0,
    *,
    memory: int | None = None,
    load: float = 1.0,
    weight: float = 1.0,
    opt: bool | None = None,
    pinned: bool = False,
    busy: bool = False,
    type_: ModelType = ModelType.LLM,
) -> Resident:
    return Resident(
        name,
        type_,
        Device.CPU,
        False,
        SlotPolicy.STANDARD,
        pinned,
        busy,
        NOW - idle,
        memory_bytes=memory,
        load_seconds=load,
        residency=Residency(auto_evict=opt, evict_weight_factor=weight),
    )


def evicted(*args: object, **kw: object) -> list[tuple[str, EvictionKind]]:
    return [(e.name, e.kind) for e in auto_evict(*args, **kw).evict]  # type: ignore[arg-type]


PRESSURE = Memory(0.95)


def test_only_servers_that_opt_in_and_are_idle_and_unpinned_go() -> None:
    servers = [r("pinned", 90, pinned=True), r("busy", 80, busy=True), r("out", 70, opt=False)]
    assert evicted(servers, NOW, True, PRESSURE, 0.9) == []
    assert evicted([r("a", 5)], NOW, False, PRESSURE, 0.9) == []  # global off, no opt-in
    assert evicted([r("a", 5, opt=True)], NOW, False, PRESSURE, 0.9) == [("a", EvictionKind.MEMORY)]


def test_below_the_threshold_or_idle_only_nothing_but_idle_timeouts() -> None:
    assert evicted([r("a"), r("b")], NOW, True, Memory(0.5), 0.9) == []
    assert evicted([r("a")], NOW, True, None, 0.9) == []
    stale = replace(r("old", 400), residency=Residency(evict_idle_timeout=300))
    assert evicted([r("a"), stale], NOW, True, None, 0.9) == [("old", EvictionKind.IDLE)]


def test_pressure_takes_the_most_disposable_one_when_amounts_are_unknown() -> None:
    servers = [r("older", 20), r("newer", 10)]
    assert evicted(servers, NOW, True, PRESSURE, 0.9) == [("older", EvictionKind.MEMORY)]
    protected = [r("older", 20, weight=1e12), r("newer", 10)]
    assert evicted(protected, NOW, True, PRESSURE, 0.9) == [("newer", EvictionKind.MEMORY)]
    slow = [r("older", 20, load=60), r("newer", 10, load=1)]  # a slow load is costly to redo
    assert evicted(slow, NOW, True, PRESSURE, 0.9) == [("newer", EvictionKind.MEMORY)]


@pytest.mark.parametrize(
    ("used", "expected"),
    [(0.91, ["a"]), (0.93, ["a", "b"]), (0.99, ["a", "b", "c"])],
)
def test_pressure_evicts_until_the_reported_memory_covers_the_excess(
    used: float, expected: list[str]
) -> None:
    servers = [r("a", 30, memory=2 * GIB), r("b", 20, memory=2 * GIB), r("c", 10, memory=2 * GIB)]
    memory = Memory(used, 100 * GIB)  # excess: (used - 0.9) x 100 GiB
    assert [n for n, _ in evicted(servers, NOW, True, memory, 0.9)] == expected


def test_a_server_of_unknown_memory_ends_the_pass() -> None:
    servers = [r("a", 30, memory=1 * GIB), r("b", 20), r("c", 10, memory=GIB)]
    memory = Memory(0.99, 100 * GIB)
    assert [n for n, _ in evicted(servers, NOW, True, memory, 0.9)] == ["a", "b"]


def test_score_is_lemonades_and_guards_a_non_positive_weight() -> None:
    assert score(r("a", 10, load=2), NOW) == 5.0
    assert score(r("a", 10, load=2, weight=-1), NOW) == 5.0
    assert score(r("a", 10, load=2, weight=5), NOW) == 1.0


def test_a_lowered_limit_evicts_the_least_recently_used_unpinned_beyond_it() -> None:
    servers = [
        r("p", 90, pinned=True),
        r("old", 50),
        r("new", 1),
        r("e", 5, type_=ModelType.EMBEDDING),
    ]
    got = over_capacity(servers, 2).evict
    assert [(e.name, e.kind) for e in got] == [("old", EvictionKind.CAPACITY)]
    assert [e.name for e in over_capacity(servers, 1).evict] == ["old", "new"]  # pinned stays
    assert over_capacity(servers, -1).evict == ()
