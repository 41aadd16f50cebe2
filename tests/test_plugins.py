"""Plugin loading: isolation, validation, allow/deny lists, cross-plugin backends."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lemoncore import Settings, create_app, hookimpl
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.plugins import PluginHost, load_plugins
from lemoncore.recipes import (
    Backend,
    BackendContribution,
    Device,
    DeviceKind,
    Recipe,
    SlotPolicy,
    SupportRow,
    Tier,
)

LINUX_CPU = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),))
ROW = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})


def install_dist(site: Path, name: str, source: str) -> None:
    """Make a real installed distribution with a ``lemon`` entry point under ``site``."""
    (site / f"{name}.py").write_text(textwrap.dedent(source))
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[lemon]\n{name} = {name}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for mod in [m for m in sys.modules if m.startswith("lemontest_")]:
        del sys.modules[mod]


GOOD = """
from lemoncore import hookimpl
from lemoncore.recipes import Recipe, Backend, SupportRow, DeviceKind

@hookimpl
def register_recipes():
    row = SupportRow(os={"linux"}, devices={DeviceKind.CPU: frozenset()})
    return [Recipe(name="goodrecipe", display_name="Good",
                   backends=(Backend(name="cpu", support=(row,)),))]
"""


def record(host: PluginHost, name: str) -> dict[str, object]:
    return next(r.as_dict() for r in host.records if r.name == name)


def test_broken_plugins_are_reported_and_the_rest_load(site: Path) -> None:
    install_dist(site, "lemontest_good", GOOD)
    install_dist(site, "lemontest_importerror", "import does_not_exist_anywhere\n")
    install_dist(
        site,
        "lemontest_async",
        """
        from lemoncore import hookimpl
        @hookimpl
        async def effective_device(recipe, backend):
            return "gpu"
    """,
    )
    install_dist(
        site,
        "lemontest_typo",
        """
        from lemoncore import hookimpl
        @hookimpl
        def lauch(recipe):
            return None
    """,
    )
    install_dist(
        site,
        "lemontest_baddata",
        """
        from lemoncore import hookimpl
        @hookimpl
        def register_recipes():
            return [{"name": "not-a-recipe"}]
    """,
    )
    host = load_plugins(None, [])
    assert record(host, "lemontest_good")["status"] == "loaded"
    assert "goodrecipe" in host.registry.recipes
    failures = {
        name: str(record(host, name)["error"])
        for name in (
            "lemontest_importerror",
            "lemontest_async",
            "lemontest_typo",
            "lemontest_baddata",
        )
    }
    assert "does_not_exist_anywhere" in failures["lemontest_importerror"]
    assert "'async def'" in failures["lemontest_async"]
    assert "plain 'def'" in failures["lemontest_async"]
    assert "unknown hook 'lauch'" in failures["lemontest_typo"]
    assert "not a Recipe" in failures["lemontest_baddata"]
    # A rejected async impl is unregistered: the built-in answer stands.
    recipe = host.registry.recipes["goodrecipe"]
    assert host.effective_device(recipe, recipe.backends[0], {}, LINUX_CPU) is Device.CPU


def test_allow_and_deny_lists(site: Path) -> None:
    install_dist(site, "lemontest_good", GOOD)
    assert record(load_plugins(None, ["lemontest_good"]), "lemontest_good")["status"] == "disabled"
    allowed = load_plugins(["lemontest_good"], [])
    assert [r.name for r in allowed.records if r.status == "loaded"] == ["lemontest_good"]


async def test_server_starts_and_reports_a_broken_plugin(
    site: Path, tmp_path: Path, anyio_backend: str
) -> None:
    install_dist(site, "lemontest_importerror", "raise RuntimeError('boom at import')\n")
    app = create_app(Settings(cache_dir=tmp_path / "cache"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://localhost"
    ) as client:
        info = (await client.get("/api/v1/system-info")).json()
        assert (await client.get("/v1/models")).status_code == 200
    broken = next(p for p in info["plugins"] if p["name"] == "lemontest_importerror")
    assert broken["status"] == "failed"
    assert "boom at import" in broken["error"]


class Owner:
    @hookimpl
    def register_recipes(self) -> list[Recipe]:
        return [
            Recipe(
                name="base", display_name="Base", backends=(Backend(name="native", support=(ROW,)),)
            )
        ]


class Extender:
    @hookimpl
    def register_backends(self) -> list[BackendContribution]:
        return [
            BackendContribution(recipe="base", backend=Backend(name="boxed", support=(ROW,))),
            BackendContribution(recipe="missing", backend=Backend(name="x", support=(ROW,))),
        ]


class Clash:
    @hookimpl
    def register_recipes(self) -> list[Recipe]:
        return [Recipe(name="base", display_name="Another base")]


class GpuOverride:
    @hookimpl
    def effective_device(self, backend: Backend) -> Device | None:
        return Device.GPU if backend.name == "boxed" else None

    @hookimpl
    def effective_is_amd_gpu(self, backend: Backend, options: dict[str, object]) -> bool | None:
        return True if backend.name == "boxed" and options.get("gpu") == "amd" else None

    @hookimpl
    def slot_policy(self, backend: Backend, options: dict[str, object]) -> SlotPolicy | None:
        return SlotPolicy.UNMETERED if options.get("remote") else None


def test_a_plugin_adds_a_backend_to_another_plugins_recipe() -> None:
    # Extender loads first: contributions apply once every plugin has loaded.
    host = load_plugins(
        [], [], {"extender": Extender(), "owner": Owner(), "clash": Clash(), "gpu": GpuOverride()}
    )
    base = host.registry.recipes["base"]
    assert [b.name for b in base.backends] == ["native", "boxed"]
    assert host.registry.owners["base"] == "owner"
    assert any(
        "recipe 'missing' is not installed" in w for w in record(host, "extender")["warnings"]
    )  # type: ignore[union-attr]
    assert "already registered by plugin 'owner'" in str(record(host, "clash")["error"])
    # Plugin answers override the built-in derivation only where they answer.
    boxed, native = base.backend("boxed"), base.backend("native")
    assert boxed is not None and native is not None
    assert host.effective_device(base, boxed, {}, LINUX_CPU) is Device.GPU
    assert host.effective_device(base, native, {}, LINUX_CPU) is Device.CPU
    assert host.effective_is_amd_gpu(base, boxed, {"gpu": "amd"}, LINUX_CPU) is True
    assert host.effective_is_amd_gpu(base, boxed, {}, LINUX_CPU) is False  # derived: cpu row
    assert host.slot_policy(base, native, {"remote": True}, LINUX_CPU) is SlotPolicy.UNMETERED
    assert host.slot_policy(base, native, {}, LINUX_CPU) is SlotPolicy.STANDARD


class CoreClaimer:
    @hookimpl
    def register_recipes(self) -> list[Recipe]:
        return [
            Recipe(
                name="claims",
                display_name="Claims",
                backends=(Backend(name="fast", support=(ROW,), tier=Tier.CORE),),
            )
        ]


def test_a_third_party_plugin_cannot_claim_core() -> None:
    host = load_plugins([], [], {"claimer": CoreClaimer()})
    backend = host.registry.recipes["claims"].backend("fast")
    assert backend is not None and backend.tier is Tier.COMMUNITY
    claimer = record(host, "claimer")
    assert claimer["tiers"] == {"claims:fast": "community"}
    assert any("only lemoncore's registry grants" in w for w in claimer["warnings"])  # type: ignore[union-attr]


def lemon_cli(site: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "LEMON_CACHE_DIR": str(site / "cache"),
        "LEMON_CONFIG_FILE": str(site / "c.toml"),
    }
    return subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", *args],
        env=env,
        text=True,
        capture_output=True,
        input=stdin,
        check=False,
    )


def test_cli_lists_and_uninstalls_with_a_broken_plugin_present(site: Path) -> None:
    install_dist(site, "lemontest_importerror", "raise RuntimeError('boom at import')\n")
    listing = lemon_cli(site, "plugins")
    assert listing.returncode == 0
    assert "lemontest_importerror" in listing.stdout and "boom at import" in listing.stdout
    removal = lemon_cli(site, "plugins", "uninstall", "lemon-plugin-not-installed")
    assert removal.returncode == 0  # pip runs; no plugin was imported to get there
    assert "not installed" in removal.stderr


EXPERIMENTAL_DIST = """
import json
from lemoncore import hookimpl
from lemoncore.launch import InstallPlan
from lemoncore.recipes import Backend, DeviceKind, Recipe, SupportRow, Tier

@hookimpl
def register_recipes():
    row = SupportRow(os={"linux"}, devices={DeviceKind.CPU: frozenset()})
    return [Recipe(name="wild", display_name="Wild", backends=(
        Backend(name="native", support=(row,), tier=Tier.EXPERIMENTAL),))]

@hookimpl
def install(recipe, pin):
    if recipe.name == "wild" and pin is not None:
        return InstallPlan(pin.version, artifacts=pin.artifacts)
"""


def test_cli_install_of_an_experimental_backend_needs_consent(site: Path) -> None:
    import hashlib
    import io
    import json
    import zipfile

    from lemoncore.lock import platform_key
    from lemoncore.testing import serve_directory

    install_dist(site, "lemontest_wild", EXPERIMENTAL_DIST)
    www = site / "www"
    www.mkdir()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("wild-engine", "#!/bin/sh\n")
    (www / "wild.zip").write_bytes(buffer.getvalue())
    with serve_directory(www) as url:
        lock = {
            "backends": {
                "wild": {
                    "native": {
                        "version": "1",
                        "platforms": {
                            platform_key("linux"): [
                                {
                                    "url": f"{url}/wild.zip",
                                    "sha256": hashlib.sha256(buffer.getvalue()).hexdigest(),
                                }
                            ]
                        },
                    }
                }
            }
        }
        (site / "lock.json").write_text(json.dumps(lock))
        (site / "c.toml").write_text(f'lock_files = ["{site / "lock.json"}"]\n')
        refused = lemon_cli(site, "backends", "install", "wild:native", stdin="")
        assert refused.returncode == 1
        assert "experimental" in refused.stderr and "--yes" in refused.stderr
        assert not (site / "cache/bin/wild").exists()
        done = lemon_cli(site, "backends", "install", "wild:native", "--yes")
        assert done.returncode == 0, done.stderr
        assert "experimental backend: community-developed" in done.stderr
    listing = json.loads(lemon_cli(site, "backends", "--json").stdout)
    wild = next(r for r in listing if r["recipe"] == "wild")
    assert (wild["state"], wild["tier"], wild["format"]) == ("installed", "experimental", "native")
