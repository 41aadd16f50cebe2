"""The plugin loads, declares its backend, endpoint and speech model, launches the engine
with the served name, and says how to install espeak-ng where it is missing
(in-process: no engine starts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemoncore.plugin import InstallPlan, LaunchContext, LaunchSpec, PluginHost, detect_host

import lemon_plugin_espeak


def test_it_loads_with_its_recipe_endpoint_and_speech_model(lemon_plugins: PluginHost) -> None:
    record = next(r for r in lemon_plugins.records if r.name == "espeak")
    assert record.status == "loaded", record.error
    backend = lemon_plugins.registry.recipes["espeak"].backend("cpu")
    assert backend is not None and backend.endpoints == {"/v1/audio/speech"}
    model = lemon_plugins.registry.models["espeak-en"]
    assert model.recipe == "espeak" and model.model_type == "speech"


def test_the_launch_names_the_served_model(lemon_plugins: PluginHost) -> None:
    recipe = lemon_plugins.registry.recipes["espeak"]
    backend = recipe.backend("cpu")
    assert backend is not None
    context = LaunchContext(Path("model"), {"wpm": 175}, Path("engine"), "127.0.0.1", 8000, 1)
    model = lemon_plugins.registry.models["espeak-en"]
    spec = lemon_plugins.launch_spec(recipe, backend, model, context, detect_host())
    assert isinstance(spec, LaunchSpec)
    assert "espeak-en" in spec.argv, "the engine must be told the name it serves"


def test_without_espeak_ng_the_install_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a directory without espeak-ng
    plan = lemon_plugin_espeak.install()
    assert isinstance(plan, InstallPlan) and plan.location is None
    assert plan.action and "apt install espeak-ng" in plan.action, plan
    assert "brew install espeak-ng" in plan.action


def test_with_espeak_ng_the_install_is_where_it_is() -> None:
    plan = lemon_plugin_espeak.install()
    assert plan.location is not None and (plan.location / "espeak-ng").is_file(), plan
    assert plan.version[:1].isdigit(), plan  # espeak-ng --version's number
