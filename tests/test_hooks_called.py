"""The core calls every hook it declares, through its real entry points.

A recording plugin implements every hookspec and owns a recipe whose backend is
installed by a plugin-side installer and launched as ``tinyserver.py`` (a real loopback
HTTP server standing in for an engine), so the owner hooks reach it. A bystander, the same
plugin owning nothing, records what every plugin is asked. The test then drives the core
as a user would: the app's startup, ``/api/v1/system-info``, ``/api/v1/install``,
``lemon lock refresh``, ``/api/v1/load``, a chat completion, a path no route serves (in
the owner's error shape) and ``lemon backends migrate``; and checks that the hooks
called are exactly the hookspecs of ``lemoncore.hookspecs``. A hookspec without a call
site in the core fails here; so does one the recorder does not implement (add it, and
drive its call site). It also checks that the owner hooks reached the owner only, the set
the hookspecs' docstrings name.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.routing import BaseRoute

from lemoncore import Settings, create_app, hookimpl, hookspecs
from lemoncore.app import core_of
from lemoncore.errors import ErrorShape, LemonError
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.launch import (
    Artifact,
    Installed,
    InstallPlan,
    LaunchContext,
    LaunchSpec,
    Migration,
    StartupTask,
)
from lemoncore.lock import Pin, platform_key
from lemoncore.recipes import (
    Backend,
    BackendContribution,
    Device,
    DeviceKind,
    Endpoint,
    ModelInfo,
    Recipe,
    SlotPolicy,
    SupportRow,
)

pytestmark = pytest.mark.anyio

HOOKS = {
    name
    for name, fn in vars(hookspecs).items()
    if callable(fn) and hasattr(fn, f"{hookspecs.PROJECT}_spec")
}
TINY = Path(__file__).with_name("tinyserver.py")
HOST = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),))
ROW = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})
OLD, NEW = "a" * 64, "b" * 64  # the pinned image digest, and what the publisher says now
IMAGE = "docker://registry.invalid/rec/engine:1"


class Installer:
    """Stands in for a container pull: the core awaits it instead of downloading."""

    async def install(self, on_progress: Callable[[int, int], None] | None) -> Installed:
        return Installed(record="image-id-1")

    async def uninstall(self) -> None:
        pass


class Refresher:
    async def latest(self) -> Artifact:
        return Artifact(IMAGE, NEW, extract=False, provenance="the registry, asked now")


class Recorder:
    """Implements every hook and records each call by name. With ``root`` it owns recipe
    ``rec``: backend ``native`` (pinned, installed by :class:`Installer`, launched as
    tinyserver) and, contributed to its own recipe, ``extra``."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self.calls: list[str] = []
        self.tasks_awaited = 0

    def _called(self, name: str) -> None:
        self.calls.append(name)

    # Registration

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        self._called("register_recipes")
        if self.root is None:
            return []
        return [
            Recipe(
                name="rec",
                display_name="Recorded",
                backends=(Backend(name="native", support=(ROW,)),),
            )
        ]

    @hookimpl
    def register_backends(self) -> Sequence[BackendContribution]:
        self._called("register_backends")
        if self.root is None:
            return []
        return [BackendContribution(recipe="rec", backend=Backend(name="extra", support=(ROW,)))]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        self._called("register_models")
        if self.root is None:
            return []
        weights = self.root / "cache" / "models" / "weights.bin"  # in the model store
        weights.parent.mkdir(parents=True, exist_ok=True)
        weights.write_bytes(b"weights")
        return [
            ModelInfo(
                name="rec-model",
                recipe="rec",
                checkpoint=f"file:{weights}",
                recipe_options={"backend": "native"},
            )
        ]

    @hookimpl
    def register_endpoints(self) -> Sequence[Endpoint]:
        self._called("register_endpoints")
        return []

    @hookimpl
    def register_routes(self) -> Sequence[BaseRoute]:
        self._called("register_routes")
        return []

    @hookimpl
    def register_error_shapes(self) -> Sequence[ErrorShape]:
        self._called("register_error_shapes")
        if self.root is None:
            return []

        def render(error: LemonError) -> dict[str, object]:
            return {"recorded": str(error), "status": error.status}

        return [ErrorShape(render=render, prefixes=("/rec",))]

    @hookimpl
    def register_field_checks(self) -> Sequence[Any]:
        self._called("register_field_checks")
        return []

    @hookimpl
    def register_lock(self) -> Mapping[str, Any]:
        self._called("register_lock")
        if self.root is None:
            return {}
        return {
            "backends": {
                "rec": {
                    "native": {
                        "version": "1",
                        "platforms": {
                            platform_key("linux"): [
                                {
                                    "url": IMAGE,
                                    "sha256": OLD,
                                    "extract": False,
                                    "provenance": "test",
                                }
                            ]
                        },
                    }
                }
            }
        }

    @hookimpl
    def startup_tasks(self, instance: str) -> Sequence[StartupTask]:
        self._called("startup_tasks")

        async def task() -> None:
            self.tasks_awaited += 1

        return [task]

    @hookimpl
    def migrations(self) -> Sequence[Migration]:
        self._called("migrations")
        if self.root is None:
            return []
        return [
            Migration(
                "rec-old", "an old rec install is replaced by rec:native", (self.root / "old-rec",)
            )
        ]

    # Decisions: recorded, then deferred to lemoncore's defaults

    @hookimpl
    def effective_device(
        self, recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
    ) -> Device | None:
        self._called("effective_device")
        return None

    @hookimpl
    def effective_is_amd_gpu(
        self, recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
    ) -> bool | None:
        self._called("effective_is_amd_gpu")
        return None

    @hookimpl
    def slot_policy(
        self, recipe: Recipe, backend: Backend, options: Mapping[str, Any], host: HostInfo
    ) -> SlotPolicy | None:
        self._called("slot_policy")
        return None

    # Owner hooks

    @hookimpl
    def install(
        self,
        recipe: Recipe,
        backend: Backend,
        host: HostInfo,
        config: Mapping[str, Any],
        pin: Pin | None,
    ) -> InstallPlan | None:
        self._called("install")
        if pin is None:  # ``extra``: nothing to install, it is on disk already
            return InstallPlan("1", location=TINY.parent)
        return InstallPlan(pin.version, pin.artifacts, installer=Installer())

    @hookimpl
    def refresher(
        self, recipe: Recipe, backend: Backend, config: Mapping[str, Any], pin: Pin
    ) -> Refresher | None:
        self._called("refresher")
        return Refresher()

    @hookimpl
    def preflight(
        self,
        recipe: Recipe,
        backend: Backend,
        model: ModelInfo,
        model_path: Path,
        config: Mapping[str, Any],
        host: HostInfo,
    ) -> None:
        self._called("preflight")
        assert model_path.read_bytes() == b"weights"

    @hookimpl
    def launch(
        self,
        recipe: Recipe,
        backend: Backend,
        model: ModelInfo,
        context: LaunchContext,
        host: HostInfo,
    ) -> LaunchSpec | None:
        self._called("launch")
        assert self.root is not None and context.installed["result"] == "image-id-1"
        return LaunchSpec(
            argv=(
                sys.executable,
                str(TINY),
                "--port",
                str(context.port),
                "--name",
                model.name,
                "--model",
                str(context.model_path),
                "--ctx-size",
                "512",
                "--registry",
                str(self.root / "run"),
            )
        )

    @hookimpl
    def normalize_request(
        self, recipe: Recipe, backend: Backend, endpoint: str, body: dict[str, Any]
    ) -> None:
        self._called("normalize_request")
        body["delay"] = 0  # a field tinyserver reads (no delay): changed in place


def lemon(*argv: str) -> int:
    """Run ``lemon ARGV... --json`` in-process (its output goes to stdout)."""
    from lemoncore.cli import main

    return main([*argv, "--json"])


async def test_the_core_calls_every_hook_it_declares(
    tmp_path: Path,
    anyio_backend: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    owner, bystander = Recorder(tmp_path), Recorder()
    missing = {
        h for h in HOOKS if not hasattr(getattr(Recorder, h, None), f"{hookspecs.PROJECT}_impl")
    }
    assert not missing, f"Recorder must implement {sorted(missing)} and this test drive them"
    app = create_app(
        Settings(cache_dir=tmp_path / "cache", plugins_allow=""),
        plugins={"owner": owner, "bystander": bystander},
        host=HOST,
    )
    core = core_of(app)
    # The command line builds its core from the installed entry points; give it this one.
    monkeypatch.setattr("lemoncore.core.build_core", lambda *args, **kwargs: core)
    assert {r.name: r.status for r in core.plugins.records if r.status != "disabled"} == {
        "owner": "loaded",
        "bystander": "loaded",
    }  # installed plugins: plugins_allow=""

    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as client,
    ):
        assert owner.tasks_awaited == bystander.tasks_awaited == 1

        info = (await client.get("/api/v1/system-info")).json()
        assert info["recipes"]["rec"]["backends"]["native"]["state"] == "installable"
        assert info["recipes"]["rec"]["backends"]["extra"]["state"] == "installed"

        installed = await client.post("/api/v1/install", json={"backend": "rec:native"})
        assert installed.status_code == 200, installed.text
        assert installed.json()["state"] == "installed"

        capsys.readouterr()
        # ``lemon lock refresh`` runs its own event loop: in a thread, as from a shell.
        code = await anyio.to_thread.run_sync(
            lambda: lemon("lock", "refresh", "rec:native", "--check")
        )
        refreshed = json.loads(capsys.readouterr().out)
        assert code == 1  # --check: a stale pin
        assert [(r["name"], r["stale"], r["new"]["sha256"]) for r in refreshed] == [
            ("rec:native", True, NEW)
        ]

        loaded = await client.post("/api/v1/load", json={"model_name": "rec-model"})
        assert loaded.status_code == 200, loaded.text
        health = (await client.get("/api/v1/health")).json()["all_models_loaded"]
        assert [(m["model_name"], m["backend"], m["device"]) for m in health] == [
            ("rec-model", "native", "cpu")
        ]  # lemoncore's default answered after ours

        chat = await client.post(
            "/v1/chat/completions",
            json={"model": "rec-model", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["content"] == "ok from rec-model"
        missing = await client.get("/rec/nothing")
        assert (missing.status_code, missing.json()) == (
            404,
            {"recorded": "no route /rec/nothing", "status": 404},
        )

        capsys.readouterr()
        assert lemon("backends", "migrate") == 0
        assert [m["name"] for m in json.loads(capsys.readouterr().out)] == ["rec-old"]

    assert set(owner.calls) == HOOKS, (
        f"hooks lemoncore never called: {sorted(HOOKS - set(owner.calls))}"
    )
    owner_only = set(owner.calls) - set(bystander.calls)
    documented = {
        h
        for h in HOOKS
        if "Owner hook: called only on the plugin that "
        "registered ``backend``" in " ".join((getattr(hookspecs, h).__doc__ or "").split())
    }
    assert owner_only == documented, "owner dispatch and the hookspecs' docstrings disagree"
