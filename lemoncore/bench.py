"""Client-side measurements of an OpenAI-compatible server: time to first token, decode
and prompt tokens/s, warm and cold, over prompt scenarios, with repetitions.

Every request carries a unique prefix so no prompt cache helps. Used by ``lemon bench``
and by the comparison harness in ``benchmarks/``.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

SCENARIOS = {
    "short": "Tell me a story.",
    "long": " ".join(f"item{i}" for i in range(400)) + " Summarise the list.",
}


@dataclass(frozen=True)
class Sample:
    ttft_s: float
    decode_tps: float
    prompt_tps: float


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, p10/p90 and standard deviation, rounded for reports."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 4),
        "p10": round(pct(0.1), 4),
        "p90": round(pct(0.9), 4),
        "p99": round(pct(0.99), 4),
        "stdev": round(statistics.stdev(ordered), 4) if len(ordered) > 1 else 0.0,
    }


@dataclass(frozen=True)
class Target:
    """A model, on a chosen backend (``None``: the one the server picks)."""

    model: str
    backend: str | None = None

    @property
    def label(self) -> str:
        return f"{self.model}@{self.backend}" if self.backend else self.model


def targets(names: Sequence[str], backend: str | None = None) -> list[Target]:
    """``MODEL`` or ``MODEL@BACKEND`` (``nathanw`` or ``llamacpp:nathanw``); ``backend``
    applies to the names without one."""
    found = []
    for name in names:
        model, _, chosen = name.partition("@")
        chosen = chosen or backend or ""
        found.append(Target(model, chosen.rpartition(":")[2] or None))
    return found


def skip_reason(client: httpx.Client, url: str, target: Target) -> str:
    """Why ``target`` cannot run on the server now (its backend is not installed), or ""."""
    found = client.get(f"{url}/v1/models/{target.model}")
    if found.status_code != 200:
        return f"model {target.model!r} is not in the catalogue"
    if target.backend is None:
        return ""
    recipe = found.json().get("recipe")
    backends = (
        client.get(url + "/api/v1/system-info")
        .json()["recipes"]
        .get(recipe, {})
        .get("backends", {})
    )
    state = backends.get(target.backend)
    if state is None:
        return f"recipe {recipe} has no backend {target.backend!r}"
    if state["state"] != "installed":
        fix = f" (fix: {state['action']})" if state.get("action") else ""
        return f"{recipe}:{target.backend} is {state['state']}{fix}"
    return ""


def select(client: httpx.Client, url: str, target: Target) -> float:
    """Load ``target`` on its backend (an explicit load reloads a model served by another
    backend) and check the server says so; seconds it took. Without a backend, a model
    loaded on a chosen one is unloaded, so the server's own choice serves it."""
    if target.backend is None:
        loaded = client.get(url + "/api/v1/health").json()["all_models_loaded"]
        if any(m.get("model_name") == target.model for m in loaded):
            client.post(url + "/api/v1/unload", json={"model_name": target.model})
        return 0.0
    started = time.perf_counter()
    loaded = client.post(
        url + "/api/v1/load", json={"model_name": target.model, "backend": target.backend}
    )
    took = time.perf_counter() - started
    if loaded.status_code != 200:
        raise RuntimeError(
            f"{target.label}: loading failed: "
            f"{loaded.json().get('error', {}).get('message', loaded.text)}"
        )
    serving = [
        m.get("backend")
        for m in client.get(url + "/api/v1/health").json()["all_models_loaded"]
        if m.get("model_name") == target.model
    ]
    if serving != [target.backend]:
        raise RuntimeError(f"{target.label}: the server serves it on {serving}")
    return took


def stream_once(
    client: httpx.Client, api: str, model: str, prompt: str, max_tokens: int = 96
) -> Sample:
    body = {
        "model": model,
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": f"[{uuid.uuid4()}] {prompt}"}],
    }
    start = time.perf_counter()
    first = last = 0.0
    tokens, prompt_tokens = 0, 0
    with client.stream("POST", api + "/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                prompt_tokens = chunk["usage"].get("prompt_tokens", 0)
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                last = time.perf_counter()
                first = first or last
                tokens += 1
    ttft = first - start
    decode = (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0
    return Sample(ttft, decode, prompt_tokens / ttft if ttft else 0.0)


def peak_memory(client: httpx.Client, url: str, model: str) -> int | None:
    """The peak host memory the server reports for ``model``'s backend (its process, or
    its container's cgroup), in bytes; ``None`` where it does not know."""
    loaded = client.get(url + "/api/v1/health").json()["all_models_loaded"]
    peak = next((m.get("peak_memory_bytes") for m in loaded if m.get("model_name") == model), None)
    return peak if isinstance(peak, int) else None


def client_for(api_key: str | None) -> httpx.Client:
    """A client for lemoncore's own routes, with the key a server that requires one wants."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(timeout=600, headers=headers)


def bench(
    url: str,
    models: Sequence[str | Target],
    reps: int = 5,
    cold: bool = True,
    max_tokens: int = 96,
    api_key: str | None = None,
    progress: Callable[[str], None] = lambda step: None,
) -> dict[str, object]:
    """Warm and (optionally) cold runs of every scenario for each target on a lemoncore
    server at ``url``: the same prompts, each with a unique prefix, in rounds that
    interleave the targets (each round starts with an unmeasured warm-up, which also
    reloads a target another one evicted). Cold runs unload the model first. A target
    whose backend is not installed is reported as skipped, with the reason. ``progress``
    is told each step as it starts (``round 1/5: M, prompt 'short'``)."""
    chosen = [t if isinstance(t, Target) else Target(t) for t in models]
    report: dict[str, object] = {}
    with client_for(api_key) as client:
        running = []
        for target in chosen:
            if reason := skip_reason(client, url, target):
                report[target.label] = {"skipped": reason}
            else:
                running.append(target)
        warm: dict[tuple[str, str], list[Sample]] = {}
        peaks: dict[str, int] = {}
        for round_ in range(1, reps + 1):
            for target in running:
                if target.backend or len(running) > 1:
                    select(client, url, target)
                for name, prompt in SCENARIOS.items():
                    progress(f"round {round_}/{reps}: {target.label}, prompt {name!r}")
                    stream_once(client, url + "/v1", target.model, prompt, 4)  # warm-up
                    warm.setdefault((target.label, name), []).append(
                        stream_once(client, url + "/v1", target.model, prompt, max_tokens)
                    )
                if (peak := peak_memory(client, url, target.model)) is not None:
                    peaks[target.label] = max(peak, peaks.get(target.label, 0))
        for target in running:
            result: dict[str, object] = {
                name: _summary(warm[target.label, name]) for name in SCENARIOS
            }
            if target.label in peaks:
                result["peak_memory_mib"] = round(peaks[target.label] / 2**20)
            if cold:
                samples = []
                for start in range(1, reps + 1):
                    progress(f"{target.label}: cold start {start}/{reps}")
                    client.post(url + "/api/v1/unload", json={"model_name": target.model})
                    loading = select(client, url, target)  # the load counts: it is cold
                    sample = stream_once(
                        client, url + "/v1", target.model, SCENARIOS["short"], max_tokens
                    )
                    samples.append(
                        Sample(sample.ttft_s + loading, sample.decode_tps, sample.prompt_tps)
                    )
                result["cold"] = _summary(samples)
            report[target.label] = result
    return report


def _summary(samples: Sequence[Sample]) -> dict[str, object]:
    return {
        "ttft_ms": spread([s.ttft_s * 1000 for s in samples]),
        "decode_tps": spread([s.decode_tps for s in samples]),
        "prompt_tps": spread([s.prompt_tps for s in samples]),
    }
