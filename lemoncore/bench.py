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
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

SCENARIOS = {"short": "Tell me a story.",
             "long": " ".join(f"item{i}" for i in range(400)) + " Summarise the list."}


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

    return {"n": len(ordered), "p50": round(statistics.median(ordered), 4),
            "p10": round(pct(0.1), 4), "p90": round(pct(0.9), 4),
            "p99": round(pct(0.99), 4),
            "stdev": round(statistics.stdev(ordered), 4) if len(ordered) > 1 else 0.0}


def stream_once(client: httpx.Client, api: str, model: str, prompt: str,
                max_tokens: int = 96) -> Sample:
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "ignore_eos": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"[{uuid.uuid4()}] {prompt}"}]}
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


def bench(url: str, models: Sequence[str], reps: int = 5, cold: bool = True,
          max_tokens: int = 96) -> dict[str, object]:
    """Warm and (optionally) cold runs of every scenario for each model on a lemoncore
    server at ``url``; cold runs unload the model first."""
    report: dict[str, object] = {}
    with httpx.Client(timeout=300) as client:
        for model in models:
            result: dict[str, object] = {}
            for name, prompt in SCENARIOS.items():
                stream_once(client, url + "/v1", model, prompt, 4)  # load and warm up
                warm = [stream_once(client, url + "/v1", model, prompt, max_tokens)
                        for _ in range(reps)]
                result[name] = _summary(warm)
            if cold:
                samples = []
                for _ in range(reps):
                    client.post(url + "/api/v1/unload", json={"model_name": model})
                    samples.append(stream_once(client, url + "/v1", model,
                                               SCENARIOS["short"], max_tokens))
                result["cold"] = _summary(samples)
            report[model] = result
    return report


def _summary(samples: Sequence[Sample]) -> dict[str, object]:
    return {"ttft_ms": spread([s.ttft_s * 1000 for s in samples]),
            "decode_tps": spread([s.decode_tps for s in samples]),
            "prompt_tps": spread([s.prompt_tps for s in samples])}
