"""The ``lemon`` commands that reach a real registry or a real server with a container
engine: ``lemon lock refresh`` pinning what a tag in the local registry names now, and
``lemon bench`` and ``lemon launch`` (with a stand-in agent, ``agents/pi``) comparing
SmolLM2 on the native llama-server and on the container engine of a real ``lemon
serve`` (``boxed.py --beside-llamacpp``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from lemoncore.plugin import platform_key, running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from containers_support import BOXED_SERVER, Registry, lock_for, require_container_tools

require_container_tools()


def lemon_cli(tmp: Path, registry: Registry, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``lemon`` command, with an administrator lock that pins ds4:rocm by tag
    only (as today's DS4 pin is) to the local registry."""
    admin = tmp / "admin-lock.json"
    admin.write_text(
        json.dumps(
            {
                "backends": {
                    "ds4": {
                        "rocm": {
                            "version": "rocm-7.14",
                            "platforms": {
                                platform_key("linux"): [
                                    {
                                        "url": f"docker://{registry.host}/lemontest/refresh:1",
                                        "sha256": None,
                                        "provenance": "test: tag only",
                                    }
                                ]
                            },
                        }
                    }
                }
            }
        )
    )
    env = {
        **os.environ,
        "LEMON_CACHE_DIR": str(tmp / "cache"),
        "LEMON_LOCK_FILES": json.dumps([str(admin)]),
        "LEMON_RECIPES": json.dumps(
            {"ds4": {"trusted_namespaces": [f"{registry.host}/lemontest/"]}}
        ),
    }
    return subprocess.run(
        [str(Path(sys.executable).with_name("lemon")), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_lock_refresh_pins_what_a_tag_names_now_and_checks_for_staleness(
    registry: Registry, tmp_path: Path
) -> None:
    rootfs = registry.root / "rootfs.tar"
    first = registry.push(rootfs, "refresh", {"org.opencontainers.image.version": "1"})
    check = lemon_cli(tmp_path, registry, "lock", "refresh", "ds4:rocm", "--check", "--json")
    assert check.returncode == 1, check.stderr
    [row] = json.loads(check.stdout)
    assert row["stale"] and row["old"]["sha256"] is None
    assert row["new"]["url"].endswith(f"/lemontest/refresh:1@{first}")

    refused = lemon_cli(tmp_path, registry, "lock", "refresh", "ds4:rocm")
    assert refused.returncode == 1 and "--yes" in refused.stderr  # nothing written
    assert not (tmp_path / "cache" / "refreshed-lock.json").exists()
    accepted = lemon_cli(tmp_path, registry, "lock", "refresh", "ds4:rocm", "--yes")
    assert accepted.returncode == 0, accepted.stderr
    pins = json.loads(lemon_cli(tmp_path, registry, "lock", "--json").stdout)
    [pin] = [p for p in pins if p["name"] == "ds4:rocm"]
    assert pin["sha256"] == first.removeprefix("sha256:")
    assert pin["provenance"].startswith("refreshed on ")
    assert "was unpinned" in pin["provenance"]
    assert lemon_cli(tmp_path, registry, "lock", "refresh", "ds4:rocm", "--check").returncode == 0

    second = registry.push(rootfs, "refresh", {"org.opencontainers.image.version": "2"})
    assert second != first
    stale = lemon_cli(tmp_path, registry, "lock", "refresh", "ds4:rocm", "--check")
    assert stale.returncode == 1
    assert f"@{first}" in stale.stdout and f"@{second}" in stale.stdout
    assert "STALE" in stale.stdout


# --- bench and launch across engines: the llama.cpp recipe, native and in a container

AGENTS = Path(__file__).with_name("agents")


def test_bench_and_launch_compare_a_core_and_a_container_engine(
    registry: Registry, images: dict[str, str], tmp_path: Path
) -> None:
    """The real ``lemon bench`` and ``lemon launch`` against a real server: SmolLM2 on the
    native llama-server (``pypi``) and on the container engine (``nathanw``, the test
    image). bench: the same prompts interleaved, one table; a backend that is not
    installed (``cpu``) is skipped, saying why. launch: the agent (a stand-in for pi's
    print mode, ``agents/pi``) runs once per backend, with its exit code, time, tokens
    and output recorded."""
    lock_file = tmp_path / "lock.json"
    lock_file.write_text(json.dumps(lock_for(registry, "llama", images["plain"])))
    model = "SmolLM2-135M-Instruct-GGUF"
    with running_server(
        tmp_path / "cache",
        command=(str(BOXED_SERVER),),
        args=("--lock", str(lock_file), "--beside-llamacpp"),
    ) as server:
        for backend in ("pypi", "nathanw"):
            httpx.post(
                server.url + "/api/v1/install", json={"backend": f"llamacpp:{backend}"}, timeout=120
            ).raise_for_status()
        bench = subprocess.run(
            [
                str(Path(sys.executable).with_name("lemon")),
                "bench",
                "--server",
                server.url,
                "--reps",
                "2",
                "--warm-only",
                "--max-tokens",
                "8",
                f"{model}@pypi",
                f"{model}@llamacpp:nathanw",
                f"{model}@cpu",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert bench.returncode == 0, bench.stderr
        report = json.loads(bench.stdout)
        loaded = httpx.get(server.api + "/health").json()["all_models_loaded"]
        launch = subprocess.run(
            [
                str(Path(sys.executable).with_name("lemon")),
                "launch",
                "pi",
                "-m",
                "smollm2",
                "--backend",
                "pypi",
                "--backend",
                "llamacpp:nathanw",
                "--agent-args=-p 'Say hi in French'",
                "--out",
                str(tmp_path / "runs"),
                "--server",
                server.url,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PATH": f"{AGENTS}{os.pathsep}{os.environ['PATH']}"},
        )
    assert launch.returncode == 0, launch.stdout + launch.stderr
    runs = json.loads(launch.stdout)
    assert [r["target"] for r in runs] == [f"{model}@pypi", f"{model}@nathanw"]
    for run in runs:
        assert run["exit_code"] == 0 and run["wall_s"] > 0, run
        assert run["tokens"] > 0  # counted by lemoncore from each answer's usage
        assert Path(run["output"]).read_text().strip()  # the model's answer
    assert json.loads((tmp_path / "runs" / "results.json").read_text()) == runs
    for label in (f"{model}@pypi", f"{model}@nathanw"):
        # the weights (~94 MiB) are resident: llama-server's own peak, the container's cgroup
        assert report[label]["peak_memory_mib"] > 90, report[label]
        for scenario in ("short", "long"):
            run = report[label][scenario]
            assert run["ttft_ms"]["n"] == 2 and run["decode_tps"]["p50"] > 0, (label, run)
    assert "llamacpp:cpu is" in report[f"{model}@cpu"]["skipped"]
    # the last target measured ran in the container (bench checks each target's backend)
    [served] = [m for m in loaded if m["model_name"] == model]
    assert served["backend"] == "nathanw" and "--network=none" in served["launch_command"]
