"""The operation of each routed endpoint (:func:`routed`): what the route table serves
and documents for an inference endpoint, lemoncore's or a plugin's, and what the engine
routes share (its answer and event shapes, their errors)."""

from __future__ import annotations

from pydantic import JsonValue

from lemoncore.api import bodies, inference
from lemoncore.api.operation import OPENAI, Media, Operation
from lemoncore.recipes import Endpoint

# One event of an inference stream (schemathesis reads an event stream's `schema` per
# event, as Open API 3.2's `itemSchema`); the engine's chunks are not lemoncore's to type.
ENGINE_EVENT: dict[str, JsonValue] = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "description": "A JSON chunk of the engine's answer; `[DONE]` "
            "last, or an OpenAI error object when the backend fails",
        }
    },
}


INFERENCE_ERRORS = (400, 404, 409, 502, 503)
ENGINE_ANSWER: dict[str, JsonValue] = {
    "type": "object",
    "description": "The engine's answer, passed through",
}


_DESCRIPTIONS = {
    "/v1/chat/completions": "Loads the model when needed. Usage on every non-streaming "
    "answer and on streams with `stream_options.include_usage`; a "
    "stream ends with `data: [DONE]`, or with an error frame when "
    "the backend fails.",
    "/v1/embeddings": "For models labelled `embeddings`.",
    "/v1/messages": "Anthropic's Messages API: passed through to backends that serve it "
    "(llama.cpp), translated to chat completions for the others; "
    "lemoncore's own errors are Anthropic-shaped here.",
    "/v1/messages/count_tokens": "Passed through, or counted with a one-token chat "
    "completion on backends that serve only chat.",
    "/v1/responses": "OpenAI's Responses API: passed through to backends that serve it, "
    "translated to chat completions for the others (which keep no "
    "responses: `previous_response_id` is refused there).",
}


def routed(endpoint: Endpoint) -> Operation:
    """The operation of a routed endpoint: served under ``/v1`` and ``/api/v1`` when its
    path starts with ``/v1/``, else as it is."""
    prefix, route = (
        (OPENAI, endpoint.path[3:]) if endpoint.path.startswith("/v1/") else ("", endpoint.path)
    )
    form = endpoint.body == "multipart"
    answer: Media = (
        ENGINE_ANSWER
        if endpoint.media_type == "application/json"
        else {"type": "string", "format": "binary"}
    )
    return Operation(
        "POST",
        route,
        inference.routed(endpoint),
        endpoint.summary,
        prefix=prefix,
        body=bodies.form_of(endpoint) if form else bodies.body_of(endpoint),
        body_media="multipart/form-data" if form else "application/json",
        engine=True,
        errors=INFERENCE_ERRORS,
        ok={
            endpoint.media_type: answer,
            **({"text/event-stream": ENGINE_EVENT} if endpoint.streams else {}),
        },
        description=_DESCRIPTIONS.get(
            endpoint.path, f"Served by backends whose engine answers `{endpoint.path}` itself."
        ),
        anthropic_errors=endpoint.errors == "anthropic",
    )
