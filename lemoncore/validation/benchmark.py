"""The validation's benchmark: warm runs of :mod:`lemoncore.bench`'s scenarios and a
cold start against the validation's server, summarised for the report."""

from __future__ import annotations

import httpx

from lemoncore.bench import (
    SCENARIOS,
    Sample,
    Target,
    peak_memory,
    select,
    spread,
    stream_once,
    warm_up,
)
from lemoncore.validation.facts import Benchmark, ScenarioNumbers


def measure(client: httpx.Client, url: str, target: Target, quick: bool) -> Benchmark:
    """The benchmark: ``quick``, one warm run of the short prompt; else three of each
    scenario and one cold start (unload, load, first answer). Each run follows an
    unmeasured warm-up; each prompt has a unique prefix (no prompt cache helps)."""
    reps, max_tokens = (1, 32) if quick else (3, 64)
    select(client, url, target)
    found: Benchmark = {
        "endpoint": "/v1/chat/completions",
        "kind": "chat",
        "reps": reps,
        "max_tokens": max_tokens,
    }

    def warm(prompt: str) -> ScenarioNumbers:
        samples = []
        for _ in range(reps):
            warm_up(client, url + "/v1", target.model, prompt, ignore_eos=True)
            samples.append(stream_once(client, url + "/v1", target.model, prompt, max_tokens))
        return summary(samples)

    found["short"] = warm(SCENARIOS["short"])
    if not quick:
        found["long"] = warm(SCENARIOS["long"])
    if (peak := peak_memory(client, url, target.model)) is not None:
        found["peak_memory_mib"] = round(peak / 2**20)
        found["peak_memory_note"] = "host memory of the engine; GPU memory is not counted"
    if not quick:
        client.post(url + "/api/v1/unload", json={"model_name": target.model})
        loading = select(client, url, target)
        cold = stream_once(client, url + "/v1", target.model, SCENARIOS["short"], max_tokens)
        found["cold_start_ttft_ms"] = round((loading + cold.ttft_s) * 1000, 1)
    assert found["short"]["decode_tps"]["p50"] > 0, "no tokens were streamed"
    return found


def summary(samples: list[Sample]) -> ScenarioNumbers:
    return {
        "ttft_ms": spread([s.ttft_s * 1000 for s in samples]),
        "decode_tps": spread([s.decode_tps for s in samples]),
        "prompt_tps": spread([s.prompt_tps for s in samples]),
    }
