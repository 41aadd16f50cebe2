"""Run-time configuration as pure decisions: what a change may set (typed, bounded, no
unknown keys), what it changes and implies (a lowered max_loaded_models evicts; the
llama.cpp section new loads use), and a load's auto-eviction options resolved over the
global defaults. The guard's admin marker and the control's are the same key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from lemoncore.api.guard import ADMIN_SCOPE, required_key
from lemoncore.options import Layer, OptionError
from lemoncore.recipes import Device, ModelType, SlotPolicy
from lemoncore.serving import control, residency
from lemoncore.serving.eviction import Resident
from lemoncore.serving.runtime import BackendUnusable, RuntimeChange, RuntimeConfig, plan_change
from lemoncore.settings import EvictionSettings, Settings

BACKENDS = {"cpu": "", "vulkan": "", "rocm": "unsupported: no AMD GPU"}


def resident(name: str, last_used: float, pinned: bool = False) -> Resident:
    return Resident(
        name, ModelType.LLM, Device.CPU, False, SlotPolicy.STANDARD, pinned, False, last_used
    )


def current(**kw: object) -> RuntimeConfig:
    return RuntimeConfig.of(Settings(cache_dir="/nonexistent", **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "body",
    [
        {"max_loaded_models": 0},
        {"max_loaded_models": -2},
        {"max_loaded_models": "2"},
        {"ctx_size": -5},
        {"log_level": "loud"},
        {"auto_evict": "yes"},
        {"auto_evict_threshold_pct": 1.5},
        {"evict_weight_factor": 0},
        {"port": 8080},
    ],
)
def test_a_change_is_typed_and_bounded(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RuntimeChange.model_validate(body)


def test_a_lowered_limit_evicts_and_a_raised_one_does_not() -> None:
    servers = [resident("a", 1), resident("b", 2), resident("c", 3, pinned=True)]
    found = plan_change(
        current(max_loaded_models=3), RuntimeChange(max_loaded_models=2), servers, {}, BACKENDS
    )
    assert [e.name for e in found.evict.evict] == ["a"]
    assert found.config.max_loaded_models == 2 and found.changed == {"max_loaded_models": 2}
    raised = plan_change(
        current(max_loaded_models=1), RuntimeChange(max_loaded_models=4), servers, {}, BACKENDS
    )
    assert raised.evict.evict == ()


def test_ctx_size_and_backend_make_the_section_new_loads_use() -> None:
    change = RuntimeChange(ctx_size=4096, llamacpp_backend="vulkan")
    found = plan_change(current(), change, [], {"threads": 4, "ctx_size": 1}, BACKENDS)
    assert found.llamacpp_section == {"threads": 4, "ctx_size": 4096, "backend": "vulkan"}
    back = plan_change(
        found.config,
        RuntimeChange(ctx_size=-1, llamacpp_backend="auto"),
        [],
        found.llamacpp_section or {},
        BACKENDS,
    )
    assert back.llamacpp_section == {"threads": 4} and back.config.ctx_size is None
    with pytest.raises(BackendUnusable, match=r"not a llama\.cpp backend"):
        plan_change(current(), RuntimeChange(llamacpp_backend="cuda"), [], {}, BACKENDS)
    with pytest.raises(BackendUnusable, match="cannot load here: unsupported"):
        plan_change(current(), RuntimeChange(llamacpp_backend="rocm"), [], {}, BACKENDS)


def test_an_unchanged_value_changes_nothing() -> None:
    found = plan_change(
        current(), RuntimeChange(max_loaded_models=1, auto_evict=False), [], {}, BACKENDS
    )
    assert found.changed == {} and found.llamacpp_section is None
    on = plan_change(
        current(), RuntimeChange(auto_evict=True, evict_idle_timeout=5), [], {}, BACKENDS
    )
    assert on.config.eviction.auto_evict and on.config.eviction.evict_idle_timeout == 5


def test_a_loads_auto_eviction_options_resolve_over_the_defaults() -> None:
    layers = (
        Layer("in model m's recipe_options", {"evict_weight_factor": 3, "ctx_size": 8}),
        Layer("in the request", {"auto_evict": True, "downsize_idle_timeout": 0}),
    )
    rest, own = residency.split(layers)
    assert [dict(layer.values) for layer in rest] == [{"ctx_size": 8}, {}]
    got = residency.resolve(EvictionSettings(evict_idle_timeout=9), own)
    assert (got.auto_evict, got.evict_idle_timeout, got.evict_weight_factor) == (True, 9, 3)
    assert got.downsize_idle_timeout == 0
    assert residency.resolve(EvictionSettings(), ()).auto_evict is None  # the global applies
    with pytest.raises(OptionError, match="in the request must be a boolean"):
        residency.resolve(EvictionSettings(), (Layer("in the request", {"auto_evict": 1}),))
    with pytest.raises(OptionError, match="above 0"):
        residency.resolve(EvictionSettings(), (Layer("x", {"evict_weight_factor": 0}),))


def test_internal_paths_are_management_routes_and_the_markers_agree() -> None:
    assert required_key("/internal/set") == "admin"
    assert required_key("/internal/config") == "admin"
    assert ADMIN_SCOPE == control.ADMIN_SCOPE
