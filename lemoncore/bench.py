"""Client-side measurements of an OpenAI-compatible server: time to first token, decode
and prompt tokens/s, warm and cold, over prompt scenarios, with repetitions; each request
with a unique prefix (no prompt cache helps). Used by ``lemon bench`` and ``benchmarks/``.

A token is any streamed piece, thinking (``delta.reasoning_content``, llama-server's
``--reasoning-format deepseek``, or ``delta.reasoning``) or answer (``content``,
``tool_calls``): TTFT is to the first of either, and the two are counted apart
(:func:`token_counts`). A stream with no token at all is :class:`Refused`, never a number.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx

from lemoncore.errors import LemonError

SCENARIOS = {
    "short": "Tell me a story.",
    "long": " ".join(f"item{i}" for i in range(400)) + " Summarise the list.",
}


DEFAULT_MAX_TOKENS = 96  # each measured answer's budget (recorded benchmarks use it)
THINK_MAX_TOKENS = 1024  # ``lemon bench --think``: room for a reasoning model's thinking
WARM_UP_TOKENS = 4

Kind = Literal["thinking", "answer"]


@dataclass(frozen=True)
class Sample:
    """One timed answer. ``decode_tps`` is 0.0 when fewer than two tokens arrived (no
    interval to time). ``counted_from`` says where ``thinking_tokens`` and
    ``answer_tokens`` come from: ``"usage"`` (the server's count) or ``"stream"`` (the
    streamed chunks of each kind)."""

    ttft_s: float
    decode_tps: float
    prompt_tps: float
    thinking_tokens: int = 0
    answer_tokens: int = 0
    counted_from: str = "stream"
    finish_reason: str | None = None
    exhausted_by_thinking: bool = False


class Refused(LemonError, RuntimeError):
    """A sample with nothing to time: no token of any kind arrived (its message says
    what the server did send). A ``RuntimeError`` too: what measures it fails with it."""

    code = "no_token"


def token_kinds(delta: Mapping[str, Any]) -> tuple[Kind, ...]:
    """What a chat chunk's ``delta`` carries: ``"thinking"`` (a non-empty
    ``reasoning_content`` or ``reasoning``), ``"answer"`` (a non-empty ``content`` or
    ``tool_calls``), both, or nothing (a role alone, an empty or null piece, the finish)."""
    kinds: list[Kind] = []
    if delta.get("reasoning_content") or delta.get("reasoning"):
        kinds.append("thinking")
    if delta.get("content") or delta.get("tool_calls"):
        kinds.append("answer")
    return tuple(kinds)


def token_counts(
    thinking_chunks: int, answer_chunks: int, usage: Mapping[str, Any]
) -> tuple[int, int, str]:
    """Thinking and answer tokens, and their source. ``"usage"``: the server's
    ``usage.completion_tokens_details.reasoning_tokens``, the answer being
    ``completion_tokens`` less those, when both are integers, the second no smaller, and
    the count is not a zero that streamed thinking contradicts (some servers always report
    0). Else ``"stream"``: the chunks of each kind, a chunk counted as a token."""
    details = usage.get("completion_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    completion = usage.get("completion_tokens")
    if (
        isinstance(reasoning, int)
        and isinstance(completion, int)
        and 0 <= reasoning <= completion
        and (reasoning > 0 or thinking_chunks == 0)
    ):
        return reasoning, completion - reasoning, "usage"
    return thinking_chunks, answer_chunks, "stream"


def exhausted_by_thinking(finish: str | None, thinking_chunks: int, answer_chunks: int) -> bool:
    """Whether the thinking spent the whole budget: cut for length, with thinking
    streamed and no answer at all."""
    return finish == "length" and thinking_chunks > 0 and answer_chunks == 0


def decode_rate(tokens: int, first: float, last: float) -> float:
    """Tokens per second after the first (``first``, ``last``: their arrival times);
    0.0 with no interval to time (fewer than two tokens, or no time between them)."""
    return (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0


def no_token_reason(
    model: str, max_tokens: int, finish: str | None, usage: Mapping[str, Any]
) -> str:
    """Why a sample is refused: nothing arrived to time; what the server said instead."""
    reason = (
        f"no token arrived from {model} (max_tokens {max_tokens}, finish_reason "
        f"{finish or 'none'}): no TTFT or decode rate to measure, the sample is refused"
    )
    completion = usage.get("completion_tokens")
    if isinstance(completion, int) and completion > 0:
        reason += (
            f"; the server counted {completion} completion tokens but streamed none "
            "(thinking it does not stream?)"
        )
    return reason


def budget(max_tokens: int | None, think: bool) -> int:
    """A measured answer's ``max_tokens``: the one asked for, else
    :data:`THINK_MAX_TOKENS` for a reasoning model (``think``), else
    :data:`DEFAULT_MAX_TOKENS`."""
    if max_tokens is not None:
        return max_tokens
    return THINK_MAX_TOKENS if think else DEFAULT_MAX_TOKENS


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
    client: httpx.Client,
    api: str,
    model: str,
    prompt: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    ignore_eos: bool = True,
) -> Sample:
    """One streamed chat answer to ``prompt`` (with a unique prefix), timed: TTFT to the
    first token of any kind (:func:`token_kinds`), decode over the tokens after it (a
    chunk a token), prompt tokens/s as the usage's prompt tokens over TTFT; thinking and
    answer tokens counted apart (:func:`token_counts`). ``ignore_eos``: generate the whole
    budget (a fixed amount of work), else stop at the model's end. Raises
    :class:`Refused` when no token arrived."""
    body = {
        "model": model,
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": ignore_eos,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": f"[{uuid.uuid4()}] {prompt}"}],
    }
    start = time.perf_counter()
    first = last = 0.0
    thinking = answer = timed = 0
    usage: dict[str, Any] = {}
    finish: str | None = None
    with client.stream("POST", api + "/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if isinstance(chunk.get("usage"), dict):
                usage = chunk["usage"]
            choice = (chunk.get("choices") or [{}])[0]
            if kinds := token_kinds(choice.get("delta") or {}):
                last = time.perf_counter()
                first = first if timed else last
                timed += 1
                thinking += "thinking" in kinds
                answer += "answer" in kinds
            finish = choice.get("finish_reason") or finish
    if not timed:
        raise Refused(no_token_reason(model, max_tokens, finish, usage))
    ttft = first - start
    prompt_tokens = usage.get("prompt_tokens", 0)
    thought, said, source = token_counts(thinking, answer, usage)
    return Sample(
        ttft,
        decode_rate(timed, first, last),
        prompt_tokens / ttft if ttft > 0 else 0.0,
        thought,
        said,
        source,
        finish,
        exhausted_by_thinking(finish, thinking, answer),
    )


def warm_up(client: httpx.Client, api: str, model: str, prompt: str, ignore_eos: bool) -> None:
    """An unmeasured answer; one with no token is no failure (the measured one says so)."""
    with contextlib.suppress(Refused):
        stream_once(client, api, model, prompt, WARM_UP_TOKENS, ignore_eos)


def _measured(
    client: httpx.Client, api: str, model: str, prompt: str, max_tokens: int, ignore_eos: bool
) -> Sample | Refused:
    try:
        return stream_once(client, api, model, prompt, max_tokens, ignore_eos)
    except Refused as refused:
        return refused


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
    max_tokens: int = DEFAULT_MAX_TOKENS,
    api_key: str | None = None,
    progress: Callable[[str], None] = lambda step: None,
    *,
    ignore_eos: bool = True,
) -> dict[str, object]:
    """Warm and (optionally) cold runs of every scenario for each target on a lemoncore
    server at ``url``: the same prompts, each with a unique prefix, in rounds that
    interleave the targets (each round starts with an unmeasured warm-up, which also
    reloads a target another one evicted). Cold runs unload the model first. A target
    whose backend is not installed is reported as skipped, with the reason. ``progress``
    is told each step as it starts (``round 1/5: M, prompt 'short'``). Each run's figures
    are :func:`summary`'s; a refused sample is counted there, not raised."""
    chosen = [t if isinstance(t, Target) else Target(t) for t in models]
    report: dict[str, object] = {}
    with client_for(api_key) as client:
        running = []
        for target in chosen:
            if reason := skip_reason(client, url, target):
                report[target.label] = {"skipped": reason}
            else:
                running.append(target)
        warm: dict[tuple[str, str], list[Sample | Refused]] = {}
        peaks: dict[str, int] = {}
        api = url + "/v1"
        for round_ in range(1, reps + 1):
            for target in running:
                if target.backend or len(running) > 1:
                    select(client, url, target)
                for name, prompt in SCENARIOS.items():
                    progress(f"round {round_}/{reps}: {target.label}, prompt {name!r}")
                    warm_up(client, api, target.model, prompt, ignore_eos)
                    warm.setdefault((target.label, name), []).append(
                        _measured(client, api, target.model, prompt, max_tokens, ignore_eos)
                    )
                if (peak := peak_memory(client, url, target.model)) is not None:
                    peaks[target.label] = max(peak, peaks.get(target.label, 0))
        for target in running:
            result: dict[str, object] = {
                name: summary(warm[target.label, name]) for name in SCENARIOS
            }
            if target.label in peaks:
                result["peak_memory_mib"] = round(peaks[target.label] / 2**20)
            if cold:
                samples: list[Sample | Refused] = []
                for start in range(1, reps + 1):
                    progress(f"{target.label}: cold start {start}/{reps}")
                    client.post(url + "/api/v1/unload", json={"model_name": target.model})
                    loading = select(client, url, target)  # the load counts: it is cold
                    sample = _measured(
                        client, api, target.model, SCENARIOS["short"], max_tokens, ignore_eos
                    )
                    if isinstance(sample, Sample):
                        sample = replace(sample, ttft_s=sample.ttft_s + loading)
                    samples.append(sample)
                result["cold"] = summary(samples)
            report[target.label] = result
    return report


def summary(outcomes: Sequence[Sample | Refused]) -> dict[str, object]:
    """A run's figures over its measured samples: spreads of ``ttft_ms``,
    ``decode_tps``, ``prompt_tps``, ``thinking_tokens`` and ``answer_tokens``;
    ``counted_from``, the sources of the token counts (``"usage"``, ``"stream"`` or
    both, comma-separated; ``""`` with none measured); ``exhausted_by_thinking``, how
    many samples the thinking spent the budget of; ``refused``, each refused sample's
    reason."""
    samples = [o for o in outcomes if isinstance(o, Sample)]
    return {
        "ttft_ms": spread([s.ttft_s * 1000 for s in samples]),
        "decode_tps": spread([s.decode_tps for s in samples]),
        "prompt_tps": spread([s.prompt_tps for s in samples]),
        "thinking_tokens": spread([s.thinking_tokens for s in samples]),
        "answer_tokens": spread([s.answer_tokens for s in samples]),
        "counted_from": ", ".join(sorted({s.counted_from for s in samples})),
        "exhausted_by_thinking": sum(s.exhausted_by_thinking for s in samples),
        "refused": [str(o) for o in outcomes if isinstance(o, Refused)],
    }
