"""The plugin loads, declares its backend and model, and launches the engine with the
served name (in-process: no engine starts)."""

from __future__ import annotations

from pathlib import Path

from lemoncore.plugin import LaunchContext, LaunchSpec, PluginHost, detect_host


def test_it_loads_with_its_recipe_and_model(lemon_plugins: PluginHost) -> None:
    record = next(r for r in lemon_plugins.records if r.name == "example")
    assert record.status == "loaded", record.error
    assert lemon_plugins.registry.recipes["example"].backend("cpu") is not None
    assert lemon_plugins.registry.models["example-smollm2"].recipe == "example"


def test_the_launch_names_the_served_model(lemon_plugins: PluginHost) -> None:
    recipe = lemon_plugins.registry.recipes["example"]
    backend = recipe.backend("cpu")
    assert backend is not None
    context = LaunchContext(Path("model"), {"ctx_size": 2048}, Path("engine"), "127.0.0.1", 8000, 1)
    model = lemon_plugins.registry.models["example-smollm2"]
    spec = lemon_plugins.launch_spec(recipe, backend, model, context, detect_host())
    assert isinstance(spec, LaunchSpec)
    assert "example-smollm2" in spec.argv, "the engine must be told the name it serves"
