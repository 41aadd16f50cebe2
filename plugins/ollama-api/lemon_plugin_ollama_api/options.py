"""Ollama's ``options`` and ``format`` as OpenAI request fields and lemoncore load options."""

from __future__ import annotations

from typing import Any

from lemon_plugin_ollama_api.bodies import BadRequest, Format, Options

# Ollama option -> the chat/completions request field (llama-server reads them all).
SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
)


def request_fields(options: Options) -> dict[str, Any]:
    """The request fields ``options`` set; ``num_predict`` becomes ``max_tokens`` (a
    negative one, Ollama's "no limit", sets none)."""
    fields = {k: getattr(options, k) for k in SAMPLING if getattr(options, k) is not None}
    if options.num_predict is not None and options.num_predict >= 0:
        fields["max_tokens"] = options.num_predict
    return fields


def load_options(options: Options) -> dict[str, Any]:
    """The lemoncore load options ``options`` set: ``num_ctx`` is ``ctx_size``."""
    return {} if options.num_ctx is None else {"ctx_size": options.num_ctx}


def response_format(format_: Format) -> dict[str, Any] | None:
    """``format``: ``"json"`` is JSON mode, an object is a JSON schema the answer must
    match; ``None`` for free text."""
    if format_ is None or format_ == "":
        return None
    if format_ == "json":
        return {"type": "json_object"}
    if not format_:
        raise BadRequest("format must be 'json' or a JSON schema object, not {}")
    return {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": format_, "strict": True},
    }
