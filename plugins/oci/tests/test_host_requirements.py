"""What an engine needs before it starts, decided from data: the running kernel, a context
past the model's native one and its rope factor, memory that ``MemAvailable`` wrongly
counts as free while a Halogen runs, and each backend's start budget; then the same
decisions where users meet them (the setup assistant, a load's preflight)."""

from __future__ import annotations

import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.plugin import LaunchRefused, Settings, create_app

from lemon_plugin_oci import OciPlugin
from lemon_plugin_oci.contracts import CONTRACTS, DS4, HALOGEN
from lemon_plugin_oci.engine import Engine
from lemon_plugin_oci.memory import GIB, Memory, problem
from lemon_plugin_oci.recipes import RECIPES
from lemon_plugin_oci.requirements import ctx_problem, kernel_problem
from lemon_plugin_oci.setup import Facts

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from contract_support import FACTS
from test_setup_state import STRIX_HALO


def test_halogen_refuses_a_kernel_older_than_7_0_naming_it() -> None:
    old = kernel_problem(HALOGEN, "6.18.6-200.fc43.x86_64")
    assert "Linux 7.0 or newer" in old and "this host runs 6.18.6-200.fc43.x86_64" in old
    assert "invalid argument" in old and "reboot" in old
    assert kernel_problem(HALOGEN, "6.19.0") != ""
    for fine in ("7.0.0-rc3", "7.0.0-8-pve", "7.2.1-arch1-1", "10.1"):
        assert kernel_problem(HALOGEN, fine) == "", fine
    assert kernel_problem(HALOGEN, "unknown") == ""  # nothing to compare
    assert kernel_problem(DS4, "5.15.0") == ""  # only Halogen names a minimum


def test_a_context_past_the_native_one_needs_the_rope_factor() -> None:
    assert ctx_problem(HALOGEN, 262144, {}, "halogen") == ""
    unset = ctx_problem(HALOGEN, 524288, {}, "halogen")
    assert "ctx_size 524288 is past the model's native 262144" in unset
    assert "HALOGEN_ROPE_YARN" in unset and "recipes.halogen.rope_yarn = 2" in unset
    assert "or lower ctx_size to 262144" in unset
    assert ctx_problem(HALOGEN, 524288, {"rope_yarn": 2}, "halogen") == ""
    short = ctx_problem(HALOGEN, 1048576, {"rope_yarn": 2}, "halogen")
    assert "past 262144 x HALOGEN_ROPE_YARN 2 = 524288" in short
    assert "recipes.halogen.rope_yarn = 4" in short
    assert ctx_problem(HALOGEN, 1048576, {"rope_yarn": 4}, "halogen") == ""
    assert ctx_problem(DS4, 1048576, {}, "ds4") == ""  # no native limit recorded
    # an image whose labels narrow the rope setting away cannot be given the factor
    narrowed = replace(
        HALOGEN, settings=tuple(s for s in HALOGEN.settings if s.key != "HALOGEN_ROPE_YARN")
    )
    assert "not set" in ctx_problem(narrowed, 1048576, {"rope_yarn": 4}, "halogen")


def test_memory_a_running_halogen_holds_is_not_counted_as_free() -> None:
    # Halogen's README: MemAvailable reads ~80 GiB while ~12 GiB is really left
    after_halogen = Memory(available=80 * GIB, gtt=90 * GIB, vram=GIB // 2, held=68 * GIB)
    assert after_halogen.free_ram == 12 * GIB
    refused = problem(0, 16, after_halogen, "")
    assert "12.0 GiB of RAM is available" in refused
    assert "MemAvailable says 80.0" in refused and "68 GiB" in refused
    assert problem(0, 16, replace(after_halogen, held=0), "") == ""
    assert Memory(available=GIB, held=2 * GIB).free_ram == 0


@pytest.mark.anyio
async def test_running_halogens_are_counted_by_their_backend_label(
    tmp_path: Path, anyio_backend: str
) -> None:
    from lemon_plugin_oci.server import ContainerServer

    tool = tmp_path / "podman"
    tool.write_text(
        "#!/bin/sh\n"
        'echo "$@" >> "$0.log"\n'
        'case "$*" in *org.lemoncore.backend=halogen:rocm*) printf "lemon-a\\nlemon-me\\n";; esac\n'
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    server = ContainerServer.__new__(ContainerServer)
    server.engine, server.pinned = Engine("podman", str(tool)), {"halogen:rocm": 68.0}
    server.inputs = type("Inputs", (), {"name": "lemon-me"})()
    assert await server._held_gib() == 68.0  # the other one; not the one being started
    assert (
        "ps --filter label=org.lemoncore.backend=halogen:rocm"
        in (tmp_path / "podman.log").read_text()
    )


def test_each_backend_declares_its_start_budget() -> None:
    budgets = {
        f"{r.name}:{b.name}": next(o.default for o in b.options if o.name == "start_timeout")
        for r in RECIPES
        for b in r.backends
    }
    assert budgets == {"ds4:rocm": None, "rocmfpx:rocm": None, "halogen:rocm": 3600}
    assert HALOGEN.start_timeout is not None and HALOGEN.start_timeout >= 1800
    assert "start_period 20m" in HALOGEN.sources["start_timeout"]


@pytest.mark.anyio
async def test_the_setup_assistant_names_the_kernel_and_a_context_without_its_factor(
    tmp_path: Path, anyio_backend: str
) -> None:
    old = replace(FACTS, kernel="6.18.6-200.fc43.x86_64")

    async def states(facts: Facts, section: dict[str, object]) -> dict[str, Any]:
        app = create_app(
            Settings(cache_dir=tmp_path, plugins_allow="llamacpp", recipes={"halogen": section}),
            plugins={"oci": OciPlugin(facts=lambda: facts)},
            host=STRIX_HALO,
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost"
        ) as client:
            info = (await client.get("/api/v1/system-info")).json()["recipes"]
        return {r: info[r]["backends"]["rocm"] for r in ("halogen", "ds4")}

    found = await states(old, {})
    assert found["halogen"]["state"] == "action_required"
    assert "this host runs 6.18.6-200.fc43.x86_64" in found["halogen"]["message"]
    assert "newer kernel" in found["halogen"]["action"]
    assert "kernel" not in found["ds4"].get("message", "")  # DS4 has no minimum
    ready = replace(FACTS, kernel="7.0.0")
    found = await states(ready, {"ctx_size": 524288})
    assert "HALOGEN_ROPE_YARN" in found["halogen"]["message"]
    found = await states(ready, {"ctx_size": 524288, "rope_yarn": 2})
    assert "HALOGEN_ROPE_YARN" not in str(found["halogen"].get("message", ""))


def test_preflight_refuses_what_the_engine_would_refuse() -> None:
    [halogen] = [r for r in RECIPES if r.name == "halogen"]
    plugin = OciPlugin(facts=lambda: replace(FACTS, kernel="7.0.0"))
    plugin.preflight(halogen, halogen.backends[0], {}, {"ctx_size": 262144})
    with pytest.raises(LaunchRefused, match=r"recipes\.halogen\.rope_yarn = 4"):
        plugin.preflight(halogen, halogen.backends[0], {}, {"ctx_size": 1048576})
    old = OciPlugin(facts=lambda: replace(FACTS, kernel="6.18.6"))
    with pytest.raises(LaunchRefused, match=r"this host runs 6\.18\.6"):
        old.preflight(halogen, halogen.backends[0], {}, {"ctx_size": 4096})
    assert CONTRACTS["halogen", "rocm"] is HALOGEN


def test_ds4s_expert_cache_is_half_the_pool_and_never_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    from lemoncore.plugin import DeviceKind, HostDevice

    import lemon_plugin_oci
    from lemon_plugin_oci import memory

    gpu = HostDevice(DeviceKind.AMD_GPU, "amd card0", "gfx1151", 0, render_node="/dev/dri/r")
    for pool, said in ((64 * memory.GIB, "32GB"), (memory.GIB, ""), (0, "")):
        found = memory.Memory(available=0, gtt=pool, vram=0)
        monkeypatch.setattr(memory, "read", lambda node, found=found: found)
        # ds4-server refuses 0GB (kyuz0/ds4 ds4_server.c parse_options): the flag is left out
        assert lemon_plugin_oci.expert_cache(gpu) == said
    assert lemon_plugin_oci.expert_cache(None) == ""
