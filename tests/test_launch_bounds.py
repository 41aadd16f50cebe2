"""Two bounds the launcher puts on a start, as pure decisions and through the real router:
the start budget (``load_timeout``, raised to the floor a backend declares as its
``start_timeout`` option, ``recipes.<recipe>.start_timeout`` over both), and a model an
installed artifact declares, which loads only on the backend that declares it (not on a
native, unconfined backend of the same recipe)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from lemoncore import Settings, create_app, hookimpl
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.installs.record import InstallRecord, write_record
from lemoncore.launch import Installed, InstallPlan, LaunchContext, Lifecycle
from lemoncore.lock import Pin, platform_key
from lemoncore.recipes import (
    Backend,
    DeviceKind,
    ModelInfo,
    OptionScope,
    OptionSpec,
    Recipe,
    SupportRow,
)
from lemoncore.serving.launcher import binding_refusal, declared_on, start_budget

HOST = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),))
ROW = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})
FLOOR = OptionSpec(
    name="start_timeout", type="float", default=3600, minimum=1, scope=OptionScope.ADMIN
)
BIND = Recipe(
    name="bind",
    display_name="Bind",
    backends=(
        Backend(name="boxed", support=(ROW,), options=(FLOOR,)),
        Backend(name="bare", support=(ROW,)),
    ),
)


def declared_model(weights: Path) -> ModelInfo:
    return ModelInfo(
        name="boxed-model",
        recipe="bind",
        checkpoint=f"file:{weights}",
        recipe_options={"backend": "boxed"},
    )


def test_the_start_budget_is_the_explicit_setting_else_the_larger_default() -> None:
    assert start_budget(600, None, None) == 600  # no floor: the global setting
    assert start_budget(600, 3600, None) == 3600  # Halogen's floor over the default
    assert start_budget(7200, 3600, None) == 7200  # a larger global setting still raises it
    assert start_budget(600, 3600, 30) == 30  # recipes.<recipe>.start_timeout wins
    assert start_budget(600, None, 900) == 900


def test_a_declared_model_is_bound_to_the_backend_that_declares_it(tmp_path: Path) -> None:
    model = declared_model(tmp_path / "w.bin")
    assert binding_refusal(model, None, "bind", "bare") == ""  # declared by nothing
    assert binding_refusal(model, "boxed", "bind", "boxed") == ""
    refused = binding_refusal(model, "boxed", "bind", "bare")
    assert "'boxed-model' is declared by the bind:boxed image" in refused
    assert "not on bind:bare" in refused and "with backend 'boxed'" in refused

    def target(name: str) -> Path:
        return tmp_path / "bin" / name.replace(":", "/")

    assert declared_on(BIND, model, target) is None  # nothing installed
    pin = InstallPlan("1")
    write_record(target("bind:boxed"), InstallRecord.of(pin, Installed("img", (model,))))
    write_record(target("bind:bare"), InstallRecord.of(pin, None))
    assert declared_on(BIND, model, target) == "boxed"
    # a catalogue or user model of the same name is another model: not bound
    other = model.model_copy(update={"recipe_options": {}})
    assert declared_on(BIND, other, target) is None


class Stub(Lifecycle):
    """A server that is ready at once; records the budget its start was given."""

    base_url = "http://stub"
    argv: tuple[str, ...] = ("stub",)
    pid, returncode = None, None

    def __init__(self, name: str, budgets: list[tuple[str, float]], backend: str) -> None:
        super().__init__()
        self.name, self.budgets, self.backend = name, budgets, backend
        self.transport = httpx.MockTransport(lambda request: httpx.Response(200, json={}))

    def peak_memory(self) -> int | None:
        return None

    async def start(self, task_group: anyio.abc.TaskGroup, ready_within: float) -> None:
        self.budgets.append((self.backend, ready_within))
        self.mark_ready()

    async def stop(self, grace: float) -> None:
        self.begin_stop()
        self.mark_exited()


class Installer:
    """Stands in for a container pull whose image declares ``model``."""

    def __init__(self, model: ModelInfo) -> None:
        self.model = model

    async def install(self, on_progress: Callable[[int, int], None] | None) -> Installed:
        return Installed(record="image-id", models=(self.model,))

    async def uninstall(self) -> None:
        pass


class Binder:
    """Owns ``bind``: ``boxed`` is installed by :class:`Installer` (its image declares
    ``boxed-model``) and declares a start floor of 3600 s; ``bare`` is on disk and
    declares none. ``plain`` is a catalogue model of the recipe."""

    def __init__(self, root: Path) -> None:
        self.root, self.budgets = root, list[tuple[str, float]]()
        self.weights = root / "cache" / "models" / "w.bin"  # in the model store
        self.weights.parent.mkdir(parents=True, exist_ok=True)
        self.weights.write_bytes(b"weights")

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        return [BIND]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [ModelInfo(name="plain", recipe="bind", checkpoint=f"file:{self.weights}")]

    @hookimpl
    def register_lock(self) -> Mapping[str, Any]:
        image = {"url": "docker://registry.invalid/b/e:1", "sha256": "a" * 64, "extract": False}
        pinned = {"version": "1", "platforms": {platform_key("linux"): [image]}}
        return {"backends": {"bind": {"boxed": pinned}}}

    @hookimpl
    def install(self, backend: Backend, pin: Pin | None) -> InstallPlan:
        if backend.name == "bare":
            return InstallPlan("1", location=self.root)
        assert pin is not None
        return InstallPlan(
            pin.version, pin.artifacts, installer=Installer(declared_model(self.weights))
        )

    @hookimpl
    def launch(self, backend: Backend, model: ModelInfo, context: LaunchContext) -> Stub:
        return Stub(model.name, self.budgets, backend.name)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("load_timeout", "section", "boxed_budget"),
    [(600.0, {}, 3600.0), (7200.0, {}, 7200.0), (600.0, {"start_timeout": 45}, 45.0)],
)
async def test_loads_get_their_budget_and_declared_models_stay_on_their_backend(
    tmp_path: Path,
    anyio_backend: str,
    load_timeout: float,
    section: dict[str, Any],
    boxed_budget: float,
) -> None:
    plugin = Binder(tmp_path)
    settings = Settings(
        cache_dir=tmp_path / "cache",
        plugins_allow="",
        load_timeout=load_timeout,
        max_loaded_models=-1,
        recipes={"bind": section},
    )
    app = create_app(settings, plugins={"bind": plugin}, host=HOST)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as client,
    ):
        installed = await client.post("/api/v1/install", json={"backend": "bind:boxed"})
        assert installed.status_code == 200, installed.text
        refused = await client.post(
            "/api/v1/load", json={"model_name": "boxed-model", "backend": "bare"}
        )
        assert refused.status_code == 400, refused.text
        assert "loads only on that backend, not on bind:bare" in refused.json()["error"]["message"]
        assert plugin.budgets == []  # refused before any start
        for name in ("boxed-model", "plain"):
            loaded = await client.post("/api/v1/load", json={"model_name": name})
            assert loaded.status_code == 200, loaded.text
        # plain picks boxed too (the first installed): load it on bare as well
        await client.post("/api/v1/unload", json={"model_name": "plain"})
        loaded = await client.post("/api/v1/load", json={"model_name": "plain", "backend": "bare"})
        assert loaded.status_code == 200, loaded.text
    assert plugin.budgets == [
        ("boxed", boxed_budget),
        ("boxed", boxed_budget),
        ("bare", load_timeout),  # bare declares no floor: the global setting
    ]
