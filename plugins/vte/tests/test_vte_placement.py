"""Where VTE runs, with the real VTE plugin on described hosts and the stand-in
``vte-server``: the GPU it lands on (HIP order, VTE's table, the administrator's index),
the hosts and GPUs it cannot use (unsupported, loading nothing; the stand-in failing as
VTE does), a model it refuses without evicting anything, and GPU exclusivity against a
second AMD-GPU recipe."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from lemoncore.plugin import HostInfo, gpus_from_names

from lemon_plugin_vte.launch import vte_said

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from vte_support import CPU, LINUX_RX7600, World, chat

pytestmark = pytest.mark.anyio


async def test_a_refused_load_evicts_nothing_and_dry_run_shows_why(world: World) -> None:
    import gguf
    import numpy as np

    path = world.root / "cache" / "models" / "mamba.gguf"  # the model store
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, "mamba")
    writer.add_tensor("w", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    async with world.lemon() as client:
        pulled = await client.post(
            "/api/v1/pull",
            json={"model_name": "mamba", "recipe": "vte", "checkpoint": f"file:{path}"},
        )
        assert pulled.status_code == 200, pulled.text
        resident = await client.post("/api/v1/load", json={"model_name": "amd-smol"})
        assert resident.status_code == 200, resident.text  # on the AMD GPU VTE would take
        before = (await client.get("/api/v1/health")).json()["all_models_loaded"]
        plan = (
            await client.post("/api/v1/load", json={"model_name": "mamba", "dry_run": True})
        ).json()
        assert "'mamba' model" in plan["refused"]
        refused = await client.post("/v1/chat/completions", json=chat("mamba"))
        assert refused.status_code == 400
        assert "'mamba' model" in refused.json()["error"]["message"]
        after = (await client.get("/api/v1/health")).json()["all_models_loaded"]
        assert [(m["model_name"], m["pid"]) for m in after] == [
            (m["model_name"], m["pid"]) for m in before
        ]
    assert not [s for s in world.reports("start") if str(path) in s["argv"]]


IGPU, RX7600S = "AMD Radeon(TM) 780M Graphics", "AMD Radeon RX 7600S"
XTX, RX6800, W7600 = "AMD Radeon RX 7900 XTX", "AMD Radeon RX 6800", "AMD Radeon PRO W7600"


@pytest.mark.parametrize(
    ("windows_order", "hip_order", "config", "device"),
    [
        # The iGPU first in HIP order, second in Windows': VTE skips it by its table. (An
        # index from Windows' list, 0, would have put VTE on the iGPU.)
        (["AMD Radeon RX 7600", IGPU], [IGPU, "AMD Radeon RX 7600"], {}, "AMD Radeon RX 7600"),
        ([XTX, "AMD Radeon RX 7600"], [XTX, "AMD Radeon RX 7600"], {}, XTX),  # the first
        (
            [XTX, "AMD Radeon RX 7600"],
            [XTX, "AMD Radeon RX 7600"],
            {"device_index": 1},
            "AMD Radeon RX 7600",
        ),  # the administrator's HIP index
        (
            [RX6800, "AMD Radeon RX 7900 XT"],
            [RX6800, "AMD Radeon RX 7900 XT"],
            {},
            "AMD Radeon RX 7900 XT",
        ),  # the family keeps VTE off RDNA2
        ([IGPU, RX7600S], [IGPU, RX7600S], {}, RX7600S),  # a laptop
    ],
)
async def test_vte_lands_on_the_right_gpu(
    world: World,
    windows_order: list[str],
    hip_order: list[str],
    config: dict[str, int],
    device: str,
) -> None:
    host = HostInfo("windows", (CPU, *gpus_from_names(windows_order)))
    async with world.lemon(host=host, hip=hip_order, recipes={"vte": config}) as client:
        state = (await client.get("/api/v1/system-info")).json()["recipes"]["vte"]["backends"][
            "rocm"
        ]
        assert state["state"] == "installable", state
        reply = await client.post("/v1/chat/completions", json=chat())
        assert reply.status_code == 200, reply.text
    assert world.reports("device")[-1]["name"] == device
    env = world.reports("start")[-1]["env"]
    assert env["VTE_DEVICE_INDEX"] == (str(config["device_index"]) if config else None)


@pytest.mark.parametrize(
    ("cards", "says"),
    [
        ([W7600], "AMD Radeon PRO W7600 (gfx1102) is RDNA3 but not in VTE 0.3.7's GPU table"),
        ([IGPU, "AMD Radeon RX 7700S"], "reads AMD Radeon RX 7700S as gfx1101"),
        ([IGPU], "needs windows with amd_gpu(gfx1100,gfx1101,gfx1102)"),  # the support row
    ],
)
async def test_hosts_vte_cannot_use_are_unsupported_and_load_nothing(
    world: World, cards: list[str], says: str
) -> None:
    host = HostInfo("windows", (CPU, *gpus_from_names(cards)))
    async with world.lemon(host=host) as client:
        state = (await client.get("/api/v1/system-info")).json()["recipes"]["vte"]["backends"][
            "rocm"
        ]
        assert state["state"] == "unsupported"
        assert says in state["message"]
        refused = await client.post("/v1/chat/completions", json=chat())
        assert refused.status_code == 400 and says in refused.json()["error"]["message"]
    assert world.reports("start") == []


async def test_the_standin_fails_loudly_as_vte_does(world: World) -> None:
    """What VTE does on a host lemoncore would refuse: exit 1 with its family message,
    which lemoncore relays. VTE writes it in cp1252 and lemoncore reads UTF-8, so its
    accented letters arrive as U+FFFD (``lemon_plugin_vte/launch.py``)."""
    host = HostInfo("windows", (CPU, *gpus_from_names(["AMD Radeon RX 7600"])))
    async with world.lemon(host=host, hip=[W7600, IGPU]) as client:
        failed = await client.post("/v1/chat/completions", json=chat())
        assert failed.status_code == 503
        said = vte_said("nenhum dos 2 devices HIP visíveis pertence a essa família")
        assert re.search(said, failed.json()["error"]["message"])


async def test_linux_is_unsupported_with_the_reason(world: World) -> None:
    async with world.lemon(host=LINUX_RX7600) as client:
        state = (await client.get("/api/v1/system-info")).json()["recipes"]["vte"]["backends"][
            "rocm"
        ]
    assert state["state"] == "unsupported"
    assert "needs windows with amd_gpu(gfx1100,gfx1101,gfx1102)" in state["message"]


@pytest.mark.parametrize(
    ("order", "survivors"),
    [
        (["amd-smol", "vte-smol"], {"vte-smol"}),
        (["vte-smol", "amd-smol"], {"amd-smol"}),
        (["vte-smol", "cpu-smol"], {"vte-smol", "cpu-smol"}),
        (["cpu-smol", "vte-smol"], {"vte-smol", "cpu-smol"}),
    ],
)
async def test_gpu_exclusivity_with_the_real_plugin(
    world: World, order: list[str], survivors: set[str]
) -> None:
    async with world.lemon(max_loaded_models=4) as client:
        for name in order:
            loaded = await client.post("/api/v1/load", json={"model_name": name})
            assert loaded.status_code == 200, loaded.text
        health = (await client.get("/api/v1/health")).json()["all_models_loaded"]
    assert {m["model_name"] for m in health} == survivors
