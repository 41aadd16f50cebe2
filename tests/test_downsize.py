"""Downsizing as a pure decision (Lemonade's soft idle in EvictionEngine::evaluate_servers):
servers that opted into auto-eviction, idle for their downsize_idle_timeout, neither
pinned nor busy, not tried since their last request, whose engine can."""

from __future__ import annotations

from dataclasses import replace

from lemoncore.recipes import Device, ModelType, SlotPolicy
from lemoncore.serving.downsize import due
from lemoncore.serving.eviction import Residency, Resident

NOW = 1000.0


def r(name: str, idle: float = 90.0, timeout: float = 60.0, **kw: object) -> Resident:
    resident = Resident(
        name,
        ModelType.LLM,
        Device.CPU,
        False,
        SlotPolicy.STANDARD,
        False,
        False,
        NOW - idle,
        residency=Residency(downsize_idle_timeout=timeout),
        can_downsize=True,
    )
    return replace(resident, **kw)  # type: ignore[arg-type]


def names(residents: list[Resident], default: bool) -> list[str]:
    return [d.name for d in due(residents, NOW, default)]


def test_an_idle_server_past_its_timeout_is_downsized_once() -> None:
    assert names([r("a"), r("b", idle=30)], True) == ["a"]
    assert names([r("a", idle=60)], True) == ["a"]  # at the timeout, as Lemonade's >=
    assert names([r("a", idle=0, timeout=0)], True) == ["a"]
    assert names([r("a", downsize_tried=True)], True) == []  # once per idle spell


def test_pinned_busy_and_engines_that_cannot_stay() -> None:
    servers = [r("p", pinned=True), r("b", busy=True), r("c", can_downsize=False)]
    assert names(servers, True) == []


def test_only_servers_auto_eviction_applies_to() -> None:
    opted_in = replace(r("in"), residency=Residency(auto_evict=True, downsize_idle_timeout=60))
    opted_out = replace(r("out"), residency=Residency(auto_evict=False, downsize_idle_timeout=60))
    assert names([r("a"), opted_in, opted_out], False) == ["in"]
    assert names([r("a"), opted_in, opted_out], True) == ["a", "in"]
