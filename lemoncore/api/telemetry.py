"""What the last answers used and how fast they came: ``GET /api/v1/stats``, and which
models are streaming now (``/api/v1/health``'s ``is_streaming``).

As Lemonade Server keeps them (``src/cpp/include/lemon/wrapped_server.h``, ``struct
Telemetry``; ``src/cpp/server/router.cpp``, ``Router::record_request_telemetry_for_model``
and ``Router::get_stats``; ``src/cpp/server/streaming_proxy.cpp``,
``extract_telemetry_from_chunk``): the last request's input, output, prompt and cached
tokens, its time to first token and decode speed, and running totals.

Recorded at the API's edge, once per answer, never per token: :func:`watch` puts a
callback on the answer's resources, which run when whoever relays the answer closes it
(after the relay set :attr:`~lemoncore.serving.answer.Answer.usage`). A non-streamed
answer's engine ``timings`` (llama-server's) are read from its body; a stream's speed is
timed from when its answer began (the engine's first result, as llama-server sends its
headers then) to its end, as Lemonade's proxy does when the engine gives no timings.
State lives per router (a weak map), so each app has its own.
"""

from __future__ import annotations

import json
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import Field
from starlette.requests import Request
from starlette.responses import Response

from lemoncore.api.replies import Reply, reply
from lemoncore.serving.answer import Answer
from lemoncore.serving.router import Router

TIMINGS_BYTES = 4096  # the tail of a non-streamed body searched for its engine timings


@dataclass(frozen=True)
class RequestStats:
    """One answer's usage and speed (``None``: the engine did not say)."""

    input_tokens: int = 0
    output_tokens: int = 0
    prompt_tokens: int | None = None
    cache_tokens: int | None = None
    time_to_first_token: float = 0.0
    tokens_per_second: float = 0.0


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _num(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None


def request_stats(
    usage: Any, timings: Any, first_s: float | None, decode_s: float | None
) -> RequestStats | None:
    """An answer's stats from its ``usage`` (OpenAI's or the Responses API's) and engine
    ``timings`` (llama-server's, which win, as in Lemonade's
    ``extract_telemetry_from_chunk``), else from ``first_s`` (seconds to the answer's
    start) and ``decode_s`` (seconds from then to its end); ``None`` when the engine
    reported neither usage nor timings."""
    usage = usage if isinstance(usage, dict) else {}
    timings = timings if isinstance(timings, dict) else {}
    if not usage and not timings:
        return None
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    prompt = _int(usage.get("prompt_tokens", usage.get("input_tokens")))
    output = _int(usage.get("completion_tokens", usage.get("output_tokens")))
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
    inputs = _int(timings.get("prompt_n"))
    output = _int(timings.get("predicted_n")) if "predicted_n" in timings else output
    cached = _int(timings.get("cache_n")) if "cache_n" in timings else cached
    prompt_ms, speed = _num(timings.get("prompt_ms")), _num(timings.get("predicted_per_second"))
    ttft = prompt_ms / 1000 if prompt_ms is not None else (first_s or 0.0)
    if speed is None:
        speed = output / decode_s if output and decode_s and decode_s > 0 else 0.0
    return RequestStats(
        input_tokens=inputs if inputs is not None else prompt or 0,
        output_tokens=output or 0,
        prompt_tokens=prompt if prompt is not None else inputs,
        cache_tokens=cached,
        time_to_first_token=round(ttft, 4),
        tokens_per_second=round(speed, 2),
    )


def timings_of(body: bytes) -> Any:
    """The top-level ``timings`` object of a JSON answer, found in its last
    :data:`TIMINGS_BYTES` (llama-server puts it last) without parsing the whole body; a
    quote inside a string is escaped, so the key cannot be matched inside content."""
    start = body.rfind(b'"timings"', -TIMINGS_BYTES)
    if start < 0:
        return None
    colon = body.find(b":", start + 9)
    try:
        found, _ = json.JSONDecoder().raw_decode(body[colon + 1 :].decode().lstrip())
    except (ValueError, UnicodeDecodeError):
        return None
    return found if isinstance(found, dict) else None


class Stats(Reply):
    """``GET /api/v1/stats``: the last answer's usage and speed, and totals since start
    (Lemonade's ``Telemetry::to_json`` and ``Router::get_stats``)."""

    input_tokens: int = Field(0, description="The last answer's input (prompt) tokens")
    output_tokens: int = 0
    time_to_first_token: float = Field(0.0, description="Seconds")
    tokens_per_second: float = Field(0.0, description="The last answer's decode speed")
    prompt_tokens: int = Field(0, description="Prompt tokens, cached ones included")
    cache_tokens: int | None = Field(
        None, description="Prompt tokens the engine's cache served; null: not reported"
    )
    request_count_total: int = 0
    input_tokens_total: int = 0
    output_tokens_total: int = 0
    prompt_tokens_total: int = 0
    cache_tokens_total: int = 0
    routing_decisions_total: int = Field(0, description="Always 0: lemoncore has no router models")
    routing_switches_total: int = 0


@dataclass
class Activity:
    """A router's stats (:class:`Stats`) and its streams in progress, per model."""

    stats: Stats = field(default_factory=Stats)
    streaming: Counter[str] = field(default_factory=Counter)

    def record(self, found: RequestStats) -> None:
        """Take one answer's stats, as ``record_request_telemetry_for_model`` does."""
        s = self.stats
        prompt = found.prompt_tokens if found.prompt_tokens is not None else s.prompt_tokens
        self.stats = s.model_copy(
            update={
                "input_tokens": found.input_tokens,
                "output_tokens": found.output_tokens,
                "time_to_first_token": found.time_to_first_token,
                "tokens_per_second": found.tokens_per_second,
                "prompt_tokens": prompt,
                "cache_tokens": found.cache_tokens,
                "request_count_total": s.request_count_total + 1,
                "input_tokens_total": s.input_tokens_total + found.input_tokens,
                "output_tokens_total": s.output_tokens_total + found.output_tokens,
                "prompt_tokens_total": s.prompt_tokens_total + (found.prompt_tokens or 0),
                "cache_tokens_total": s.cache_tokens_total + (found.cache_tokens or 0),
            }
        )


_ACTIVITY: weakref.WeakKeyDictionary[Router, Activity] = weakref.WeakKeyDictionary()


def activity(router: Router) -> Activity:
    """The :class:`Activity` of ``router``'s app."""
    found = _ACTIVITY.get(router)
    if found is None:
        found = _ACTIVITY[router] = Activity()
    return found


def watch(router: Router, answer: Answer, started: float, stream: bool) -> None:
    """Record ``answer``'s stats when it closes; while it is open, a stream counts as its
    model's (``started``: ``time.monotonic()`` before the request was sent)."""
    if answer.server is None:
        return
    began, model, state = time.monotonic(), answer.server.model.name, activity(router)
    if stream:
        state.streaming[model] += 1

    async def closed() -> None:
        if stream:
            state.streaming[model] -= 1
            if state.streaming[model] <= 0:
                del state.streaming[model]
        if answer.upstream.status_code != 200:
            return
        try:
            timings = None if stream else timings_of(answer.upstream.content)
        except httpx.ResponseNotRead:  # a body passed on unread: no timings
            timings = None
        decode = time.monotonic() - began if stream else None
        found = request_stats(answer.usage, timings, began - started, decode)
        if found is not None:
            state.record(found)

    answer.resources.push_async_callback(closed)


async def stats(request: Request) -> Response:
    """``GET /api/v1/stats``."""
    return reply(activity(request.app.state.core.router).stats)
