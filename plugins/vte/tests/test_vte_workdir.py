"""VTE's working directory: VTE writes its kernel cache and kernel sources relative to it
(``compiler/codegen.py`` ``CodegenEngine``), so lemoncore gives it one of its own under the
install, per architecture, kept across loads and removed by ``lemon backends uninstall``;
the directory lemoncore runs in is never touched."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lemoncore.plugin import DeviceKind, HostDevice, HostInfo, gpus_from_names

from lemon_plugin_vte.devices import assess

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from vte_support import World, chat

pytestmark = pytest.mark.anyio
CPU = HostDevice(DeviceKind.CPU, "AMD Ryzen 7 7700")


async def test_vte_writes_only_in_its_own_directory_and_reuses_its_kernels(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    users_folder = world.root / "Documents"
    users_folder.mkdir()
    monkeypatch.chdir(users_folder)  # where lemon serve was started
    install = world.root / "cache/bin/vte/rocm"
    work = install / "work/gfx1102"  # the RX 7600's architecture
    async with world.lemon() as client:
        for _ in range(2):  # two loads of the model, one process each
            reply = await client.post("/v1/chat/completions", json=chat())
            assert reply.status_code == 200, reply.text
            unloaded = await client.post("/api/v1/unload", json={"model_name": "vte-smol"})
            assert unloaded.status_code == 200, unloaded.text
        assert list(users_folder.iterdir()) == []
        first, second = world.reports("kernels")
        assert first["cwd"] == second["cwd"] == str(work)
        assert (len(first["written"]), first["reused"]) == (3, [])
        assert (second["written"], second["reused"]) == ([], first["written"])
        assert len(list(work.glob("cache/kernels/gfx1102/kernel_*.hsaco"))) == 3
        assert len(list(work.glob("logs/Codegen/*.hip"))) == 3
        removed = await client.post("/api/v1/uninstall", json={"backend": "vte:rocm"})
        assert removed.status_code == 200, removed.text
    assert not install.exists()


@pytest.mark.parametrize(
    ("cards", "arch"),
    [
        (["AMD Radeon RX 7600"], "gfx1102"),
        (["AMD Radeon RX 7600", "AMD Radeon RX 7600 XT"], "gfx1102"),  # the same either way
        (["AMD Radeon RX 7900 XTX", "AMD Radeon RX 7600"], ""),  # HIP's order decides
    ],
)
def test_the_directory_is_the_architecture_vte_will_read(cards: list[str], arch: str) -> None:
    assert assess(HostInfo("windows", (CPU, *gpus_from_names(cards)))).arch == arch
