"""Foundation numbers: `lemon serve` start to ready, cold load of the default model, and
streaming decode tokens/s and time to first token, direct llama-server vs through lemoncore.

Run: .venv/bin/python benchmarks/foundation.py [--reps 10]
Systems are measured interleaved on the same machine; every request has a unique prefix
so no system benefits from another's prompt cache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from lemoncore.supervisor import free_port

MODEL = "SmolLM2-135M-Instruct-GGUF"
TOKENS = 96


def wait_http(url: str, limit: float = 60) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return time.perf_counter() - start
        except httpx.TransportError:
            pass
        time.sleep(0.005)
    raise RuntimeError(f"{url} not ready")


def stream_once(base: str) -> tuple[float, float]:
    """(time to first token, decode tokens/s) for one streaming chat request."""
    body = {"model": MODEL, "max_tokens": TOKENS, "stream": True, "ignore_eos": True,
            "messages": [{"role": "user", "content": f"{uuid.uuid4()} Tell me a story."}]}
    start = time.perf_counter()
    first = last = 0.0
    n = 0
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and '"content":"' in line:
                last = time.perf_counter()
                first = first or last
                n += 1
    return first - start, (n - 1) / (last - first)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=10)
    reps = parser.parse_args().reps
    tmp = Path(tempfile.mkdtemp())
    lemon_port = free_port()
    t0 = time.perf_counter()
    lemon = subprocess.Popen([sys.executable, "-m", "lemoncore.cli", "serve", "--port",
                              str(lemon_port), "--log-level", "warning"],
                             env={"LEMON_CACHE_DIR": str(tmp), "PATH": "/usr/bin:/bin"})
    lemon_url = f"http://127.0.0.1:{lemon_port}"
    wait_http(lemon_url + "/live")
    serve_ready = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        httpx.post(lemon_url + "/api/v1/load", json={"model_name": MODEL},
                   timeout=60).raise_for_status()
        cold_load = time.perf_counter() - t1
        argv = httpx.get(lemon_url + "/api/v1/health").json()["all_models_loaded"][0][
            "launch_command"]
        direct_port = free_port()
        argv[argv.index("--port") + 1] = str(direct_port)
        direct = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        direct_url = f"http://127.0.0.1:{direct_port}"
        raw_spawn_ready = wait_http(direct_url + "/health")
        try:
            results: dict[str, list[tuple[float, float]]] = {"direct": [], "lemoncore": []}
            for base in (direct_url, lemon_url):  # warm-up
                stream_once(base)
            for _ in range(reps):
                results["direct"].append(stream_once(direct_url))
                results["lemoncore"].append(stream_once(lemon_url))
        finally:
            direct.terminate()
            direct.wait()
    finally:
        lemon.terminate()
        lemon.wait()

    def summary(rows: list[tuple[float, float]]) -> dict[str, float]:
        ttft = [r[0] * 1000 for r in rows]
        tps = [r[1] for r in rows]
        return {"ttft_ms_p50": round(statistics.median(ttft), 1),
                "decode_tps_p50": round(statistics.median(tps), 1),
                "decode_tps_stdev": round(statistics.stdev(tps), 1)}

    d, lc = summary(results["direct"]), summary(results["lemoncore"])
    print(json.dumps({
        "serve_to_ready_s": round(serve_ready, 3),
        "cold_load_default_model_s": round(cold_load, 3),
        "raw_llama_server_spawn_to_ready_s": round(raw_spawn_ready, 3),
        "direct": d, "lemoncore": lc,
        "decode_ratio": round(lc["decode_tps_p50"] / d["decode_tps_p50"], 3),
        "added_ttft_ms_p50": round(lc["ttft_ms_p50"] - d["ttft_ms_p50"], 1),
        "reps": reps, "tokens": TOKENS,
    }, indent=2))


if __name__ == "__main__":
    main()
