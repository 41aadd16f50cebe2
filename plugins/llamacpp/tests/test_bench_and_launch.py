"""`lemon bench`, `lemon launch` and a smoke run of the comparison harness, against real
servers. Timings are not asserted: benchmarks report them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from lemoncore.bench import SCENARIOS
from lemoncore.plugin import ServerProcess

ROOT = Path(__file__).resolve().parents[3]


def lemon(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", *args],
        text=True,
        capture_output=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_lemon_bench_reports_warm_runs_per_scenario(server: ServerProcess) -> None:
    """Each scenario has its two warm runs (no cold ones with --warm-only), each figure
    measured (prompt tokens/s is above 0 only when the stream reported its prompt tokens),
    and the peak memory. The long scenario is a longer prompt by the engine's own count;
    which one is faster is a benchmark's finding, not asserted."""
    result = lemon(
        "bench",
        "m1",
        "--reps",
        "2",
        "--warm-only",
        "--max-tokens",
        "16",
        "--json",
        "--server",
        server.url,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["m1"]
    assert set(report) == {"short", "long", "peak_memory_mib"}, report
    for scenario in ("short", "long"):
        for figure in ("ttft_ms", "decode_tps", "prompt_tps"):
            spread = report[scenario][figure]
            assert spread["n"] == 2, (scenario, figure, spread)
            assert 0 < spread["p10"] <= spread["p50"] <= spread["p90"], (scenario, figure)
    assert report["peak_memory_mib"] > 90  # llama-server's peak, with the ~94 MiB weights
    prompt_tokens = {
        name: httpx.post(
            server.api + "/chat/completions",
            timeout=60,
            json={
                "model": "m1",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": prompt}],
            },
        ).json()["usage"]["prompt_tokens"]
        for name, prompt in SCENARIOS.items()
    }
    # 400 list items, a token each at least, on top of what both share (the template)
    assert prompt_tokens["long"] >= prompt_tokens["short"] + 400, prompt_tokens


def test_lemon_launch_wires_an_agent_to_the_server(server: ServerProcess, tmp_path: Path) -> None:
    """opencode (a stand-in that records what it was given) gets the served model and the
    user's arguments, and a config file where opencode reads one (``OPENCODE_CONFIG``:
    anomalyco/opencode ``packages/opencode/src/config/config.ts``) naming the server;
    its ``{env:LEMON_API_KEY}`` is the key (``config/variable.ts`` ``substitute``)."""
    record = tmp_path / "agent.json"
    agent = tmp_path / "bin" / "opencode"
    agent.parent.mkdir()
    agent.write_text(
        f"#!{sys.executable}\nimport json, os, re, sys\n"
        "text = open(os.environ['OPENCODE_CONFIG']).read()\n"
        "text = re.sub(r'\\{env:([^}]+)\\}', lambda m: os.environ.get(m[1], ''), text)\n"
        "config = json.loads(text)\n"
        f"json.dump({{'argv': sys.argv[1:], 'model': config['model'],"
        f" 'options': config['provider']['lemoncore']['options']}}, open({str(record)!r}, 'w'))\n"
    )
    agent.chmod(0o755)
    path = f"{agent.parent}{os.pathsep}{os.environ['PATH']}"
    done = lemon(
        "launch",
        "opencode",
        "-m",
        "smollm2",
        "--server",
        server.url,
        "--",
        "run",
        "fix the bug",
        env={"PATH": path, "LEMON_API_KEY": "agent-key"},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(record.read_text()) == {
        "argv": ["--model", "lemoncore/SmolLM2-135M-Instruct-GGUF", "run", "fix the bug"],
        "model": "lemoncore/SmolLM2-135M-Instruct-GGUF",
        "options": {"baseURL": server.api, "apiKey": "agent-key"},
    }
    missing = lemon(
        "launch", "pi", "-m", "smollm2", "--server", server.url, env={"PATH": "/usr/bin:/bin"}
    )
    assert missing.returncode == 127
    assert "npm install -g" in missing.stderr


def test_comparison_harness_smoke(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/compare.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert set(result["stream"]) >= {"direct", "lemoncore", "router"}
    assert result["streams_256"]["errors"] == 0
    assert {
        "decode_ratio",
        "added_ttft_p50_ms",
        "rps_ratio_c8",
        "cold_load_overhead_ms",
        "swap_overhead_ms",
        "serve_to_ready_s",
    } <= set(result["metrics"])
    assert (tmp_path / "smoke.md").read_text().startswith("# Benchmark smoke")
