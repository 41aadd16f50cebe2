"""The relay sweep and the scale benchmark run and produce numbers (``--smoke``: a
seconds-long pass over the harness; the figures themselves are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run(script: str, out: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--smoke", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("client", ["keepalive", "close"])
def test_the_relay_sweep_measures_every_system(tmp_path: Path, client: str) -> None:
    run("sweep.py", tmp_path, "--client", client)  # close: a connection per request
    result = json.loads((tmp_path / "sweep-smoke.json").read_text())
    assert result["machine"]["client"] == client
    for system in ("direct", "lemoncore"):
        for cell in result["sweep"][system].values():
            assert cell["chunks_per_s"] > 0 and cell["cpu_us_per_chunk"] >= 0
            assert cell["errors"] == 0
        assert result["ttft_ms"][system]["p50"] > 0
    assert (tmp_path / "sweep-smoke.md").read_text().count("\n| ") >= 2


def test_the_scale_benchmark_times_the_catalogue_and_the_fleet(tmp_path: Path) -> None:
    run("scale.py", tmp_path)
    result = json.loads((tmp_path / "scale-smoke.json").read_text())
    assert all(
        cell["downloaded"] > 0 and cell["listed"] >= 0 for cell in result["models_ms"].values()
    )
    assert all(
        cell["plan_us"] > 0 and cell["decide_us"] > 0 for cell in result["decision_us"].values()
    )


def test_the_rpc_benchmark_measures_local_and_split_models(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "rpc.py"), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "rpc-quick.json").read_text())
    assert list(result["configs"]) == ["local", "rpc1", "rpc2"]
    assert [len(c["workers"]) for c in result["configs"].values()] == [0, 1, 2]
    for cell in result["configs"].values():
        assert cell["decode_tps"]["p50"] > 0 and cell["ttft_ms"]["p50"] > 0
    assert "overhead, not a speed-up" in done.stdout
    for name in ("local", "rpc1", "rpc2"):
        assert f"| {name}: " in (tmp_path / "rpc-quick.md").read_text()
