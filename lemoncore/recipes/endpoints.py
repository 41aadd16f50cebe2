"""The routed inference endpoints: what one is (a ``POST`` naming a model, forwarded to
its backend's engine), the ones lemoncore routes itself, and what a plugin adds with
``register_endpoints``."""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from lemoncore.recipes.base import Frozen
from lemoncore.recipes.kinds import ModelType


class Endpoint(Frozen):
    """A routed inference endpoint: a ``POST`` whose body names a model, forwarded to the
    engine of that model's backend with the same routing, auth, limits, queueing,
    disconnect handling, retry and metrics as chat."""

    path: str = Field(pattern=r"^/[A-Za-z0-9_/-]+$")
    summary: str
    model_type: ModelType = ModelType.LLM
    body: Literal["json", "multipart"] = Field(
        "json",
        description="A JSON object, or ``multipart/form-data`` (an upload), which "
        "reaches the engine byte for byte",
    )
    model_field: str = Field("model", description="The body field naming the model")
    required: str | None = Field(None, description="A body field a request must have")
    streams: bool = Field(
        True, description="A ``stream: true`` body (form field ``stream=true``) is answered as SSE"
    )
    media_type: str = Field(
        "application/json",
        description="What a non-streamed answer "
        "is (the engine's ``Content-Type`` is passed through)",
    )
    max_body_bytes: int | None = Field(
        None,
        ge=1,
        description="This endpoint's body "
        "limit; the administrator's ``max_body_bytes`` "
        "caps every endpoint",
    )
    retried: bool = Field(
        True,
        description="Sent once more, to a fresh server, when the backend died before answering",
    )
    errors: Literal["openai", "anthropic"] = Field(
        "openai", description="The shape of lemoncore's own errors there"
    )
    request: type[BaseModel] | None = Field(
        None,
        description="The JSON body's model (pydantic): lemoncore validates each request "
        "with it (strict JSON types; a 400 naming the field) before routing, and the "
        "OpenAPI document shows it. The body still reaches the engine as it came. "
        "``model``, ``keep_alive`` and (where the endpoint streams) ``stream`` are "
        "lemoncore's own; declare the engine's fields",
    )

    @model_validator(mode="after")
    def _request_is_json(self) -> Endpoint:
        if self.request is not None and self.body != "json":
            raise ValueError("request describes a JSON body; a multipart endpoint has none")
        return self


@functools.cache
def core_endpoints() -> tuple[Endpoint, ...]:
    """The endpoints lemoncore routes itself; plugins add others (``register_endpoints``).
    Built on first use: importing this module validates no model."""
    return (
        Endpoint(path="/v1/chat/completions", summary="Chat completion", required="messages"),
        Endpoint(path="/v1/completions", summary="Completion", required="prompt"),
        Endpoint(
            path="/v1/embeddings",
            summary="Embeddings",
            model_type=ModelType.EMBEDDING,
            required="input",
            streams=False,
        ),
        Endpoint(
            path="/v1/messages",
            summary="Anthropic Messages",
            required="messages",
            errors="anthropic",
        ),
        Endpoint(
            path="/v1/messages/count_tokens",
            summary="Anthropic token count",
            required="messages",
            streams=False,
            errors="anthropic",
        ),
        Endpoint(path="/v1/responses", summary="OpenAI Responses", required="input"),
        Endpoint(
            path="/v1/rerank",
            summary="Rerank documents",
            model_type=ModelType.RERANKING,
            required="documents",
            streams=False,
        ),
        Endpoint(path="/tokenize", summary="Text to tokens", required="content", streams=False),
        Endpoint(path="/detokenize", summary="Tokens to text", required="tokens", streams=False),
    )
