"""``/api/chat``, ``/api/generate``, ``/api/embed`` and ``/api/embeddings`` over the
gateway's ``/v1`` endpoints.

Every answer is streamed from the engine (``stream: false`` gathers it), which is how the
durations are measured: ``load_duration`` is the load the request waited for (a model not
loaded yet, or ``num_ctx`` asking for another context), ``prompt_eval_duration`` lasts
until the first generated token, ``eval_duration`` from it to the end.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lemoncore.plugin import Gateway, LemonError, ModelInfo

from lemon_plugin_ollama_api.answers import Clock, Kind, Turn, final_line, line, status_line
from lemon_plugin_ollama_api.bodies import (
    BadRequest,
    ChatBody,
    EmbedBody,
    EmbeddingsBody,
    GenerateBody,
    Options,
    parse,
)
from lemon_plugin_ollama_api.messages import openai_messages, user_content
from lemon_plugin_ollama_api.names import find
from lemon_plugin_ollama_api.options import load_options, request_fields, response_format
from lemon_plugin_ollama_api.responses import (
    Line,
    NDJSONResponse,
    close,
    last,
    ollama_errors,
    started,
)

CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"


def loaded_options(gateway: Gateway, name: str) -> dict[str, Any] | None:
    """The options ``name`` runs with, or ``None`` when it is not loaded."""
    return next((dict(m.recipe_options) for m in gateway.loaded() if m.model_name == name), None)


async def ready(
    gateway: Gateway,
    model: ModelInfo,
    options: Options,
    clock: Clock,
    keep_alive: float | None = None,
) -> None:
    """Load ``model`` before the request when it is not loaded, or when ``num_ctx`` asks
    for a context it does not run with (keeping its other options); the time the load
    took is ``load_duration``. A ``keep_alive`` is set on the model even when it was
    loaded already."""
    current, wanted = loaded_options(gateway, model.name), load_options(options)
    if current is not None and all(current.get(k) == v for k, v in wanted.items()):
        if keep_alive is not None:
            await gateway.ensure_loaded(model.name, keep_alive)
        return
    began = time.monotonic_ns()
    if wanted:
        await gateway.load(model.name, {**(current or {}), **wanted}, keep_alive=keep_alive)
    else:
        await gateway.ensure_loaded(model.name, keep_alive)
    clock.load_ns = time.monotonic_ns() - began


async def load_or_unload(
    kind: Kind,
    gateway: Gateway,
    model: ModelInfo,
    name: str,
    options: Options,
    keep_alive: float | None,
) -> Response:
    """Ollama's answer to a request without input: load the model (kept ``keep_alive``
    seconds once idle, when given), or unload it now when ``keep_alive`` is 0."""
    if keep_alive == 0:
        if loaded_options(gateway, model.name) is not None:
            try:
                await gateway.unload(model.name)
            except LemonError as exc:
                if exc.code != "model_not_loaded":  # not merely unloaded meanwhile
                    raise
        return JSONResponse(status_line(kind, name, "unload"))
    await ready(gateway, model, options, Clock(), keep_alive)
    return JSONResponse(status_line(kind, name, "load"))


async def relay(
    kind: Kind, name: str, events: AsyncIterator[dict[str, Any]], clock: Clock, whole: bool
) -> AsyncIterator[Line]:
    """The Ollama lines of one streamed OpenAI answer: a line per piece of text (none
    when ``whole``), the tool calls once complete, then the final line."""
    turn = Turn()
    try:
        async for chunk in events:
            text, thinking = turn.feed(chunk)
            if text or thinking or turn.calls:
                clock.mark_token()
            if not whole and (text or thinking):
                yield line(kind, name, text, thinking)
    finally:
        await close(events)
    clock.mark_end()
    if not whole and turn.calls:
        yield line(kind, name, "", tool_calls=turn.tool_calls())
    yield final_line(kind, name, turn, clock, whole)


async def answer(
    kind: Kind,
    request: Request,
    model: ModelInfo,
    name: str,
    body: ChatBody | GenerateBody,
    path: str,
    openai: dict[str, Any],
    clock: Clock,
) -> Response:
    """Send ``openai`` to ``path`` and answer as Ollama: NDJSON lines, or one JSON object
    when ``stream`` is false."""
    gateway = Gateway.of(request)

    async def lines() -> AsyncIterator[Line]:
        await ready(gateway, model, body.options, clock)
        clock.mark_sent()
        events = gateway.stream(path, {**openai, "stream_options": {"include_usage": True}})
        async for item in relay(kind, name, events, clock, whole=not body.stream):
            yield item

    if body.stream:
        return NDJSONResponse(await started(lines()))
    final = await Gateway.until_disconnect(request, last(lines()))
    return JSONResponse(final) if final is not None else Response(status_code=499)


def common(body: ChatBody | GenerateBody, model: ModelInfo) -> dict[str, Any]:
    """The OpenAI request fields both ``chat`` and ``generate`` set (``keep_alive`` is
    lemoncore's own: the model stays loaded that long after the answer)."""
    fields: dict[str, Any] = {
        "model": model.name,
        **request_fields(body.options),
        "keep_alive": body.keep_alive,
    }
    if (format_ := response_format(body.format)) is not None:
        fields["response_format"] = format_
    return fields


@ollama_errors
async def chat(request: Request) -> Response:
    clock = Clock()
    body = parse(ChatBody, await request.body())
    gateway = Gateway.of(request)
    model = find(gateway, body.target)
    if not body.messages:
        return await load_or_unload(
            "chat", gateway, model, body.target, body.options, body.keep_alive
        )
    openai = {**common(body, model), "messages": openai_messages(body.messages)}
    if body.tools:
        openai["tools"] = body.tools
    return await answer("chat", request, model, body.target, body, CHAT, openai, clock)


def refuse_generate_fields(body: GenerateBody) -> None:
    """The ``/api/generate`` fields lemoncore cannot honour, refused with what to do."""
    if body.suffix:
        raise BadRequest(
            "suffix (fill-in-the-middle) is not supported by lemoncore: it "
            "routes chat and completions, not an infill endpoint; send the "
            "text before the gap as the prompt"
        )
    if body.template:
        raise BadRequest(
            "template is not supported by lemoncore: the engine applies the "
            "model's own chat template; format the prompt yourself and send "
            "it with raw: true"
        )
    if body.context:
        raise BadRequest(
            "context (deprecated by Ollama) is not supported by lemoncore: "
            "send the conversation's messages to /api/chat"
        )
    if body.raw and (body.system or body.images):
        raise BadRequest(
            "raw: true sends the prompt as it is, so system and images "
            "(which need the chat template) cannot be applied; put the system "
            "prompt in the prompt, or drop raw"
        )


@ollama_errors
async def generate(request: Request) -> Response:
    clock = Clock()
    body = parse(GenerateBody, await request.body())
    refuse_generate_fields(body)
    gateway = Gateway.of(request)
    model = find(gateway, body.target)
    if not body.prompt and not body.images:
        return await load_or_unload(
            "generate", gateway, model, body.target, body.options, body.keep_alive
        )
    if body.raw:
        openai = {**common(body, model), "prompt": body.prompt}
        return await answer(
            "generate", request, model, body.target, body, COMPLETIONS, openai, clock
        )
    messages: list[dict[str, Any]] = (
        [{"role": "system", "content": body.system}] if body.system else []
    )
    messages.append({"role": "user", "content": user_content(body.prompt, body.images)})
    openai = {**common(body, model), "messages": messages}
    return await answer("generate", request, model, body.target, body, CHAT, openai, clock)


async def embeddings_of(
    request: Request, body: EmbedBody | EmbeddingsBody, inputs: list[str]
) -> tuple[list[list[float]], Mapping[str, Any], Clock]:
    """The embedding of each input, the usage and the clock of one embeddings request."""
    clock = Clock()
    gateway = Gateway.of(request)
    model = find(gateway, body.target)
    if not inputs:
        return [], {}, clock
    await ready(gateway, model, body.options, clock)
    clock.mark_sent()
    reply = await Gateway.until_disconnect(
        request,
        gateway.complete(
            EMBEDDINGS, {"model": model.name, "input": inputs, "keep_alive": body.keep_alive}
        ),
    )
    clock.mark_end()
    if reply is None:  # the client left
        return [], {}, clock
    data = sorted(reply.get("data") or (), key=lambda d: int(d.get("index", 0)))
    return [list(d["embedding"]) for d in data], reply.get("usage") or {}, clock


@ollama_errors
async def embed(request: Request) -> Response:
    body = parse(EmbedBody, await request.body())
    if body.dimensions is not None:
        raise BadRequest(
            "dimensions is not supported by lemoncore: the engine returns "
            "the model's full embedding; truncate it yourself"
        )
    inputs = [body.input] if isinstance(body.input, str) else list(body.input)
    vectors, usage, clock = await embeddings_of(request, body, inputs)
    durations = clock.durations()
    return JSONResponse(
        {
            "model": body.target,
            "embeddings": vectors,
            "total_duration": durations["total_duration"],
            "load_duration": durations["load_duration"],
            "prompt_eval_count": int(usage.get("prompt_tokens") or 0),
        }
    )


@ollama_errors
async def embeddings(request: Request) -> Response:
    """Ollama's older single-prompt endpoint: an empty prompt has an empty embedding."""
    body = parse(EmbeddingsBody, await request.body())
    vectors, _, _ = await embeddings_of(request, body, [body.prompt] if body.prompt else [])
    return JSONResponse({"embedding": vectors[0] if vectors else []})
