"""Asking llama-server which stop sequence ended an answer, for the surfaces that report
it (Anthropic's ``stop_reason: stop_sequence``), which lemoncore translates to chat.

llama-server's chat answer does not name the matched stop word, except in ``__verbose``
(llama.cpp ``tools/server/server-task.cpp``: ``to_json_oaicompat_chat`` adds it when the
request's ``verbose`` is true, and ``to_json_oaicompat_chat_stream`` to the final chunk's
first delta); ``__verbose`` is ``to_json_non_oaicompat()`` narrowed to the request's
``response_fields`` (same file, ``json_get_nested_values``), so asking for
``["stopping_word"]`` adds only ``{"stopping_word": "..."}``. Both fields are read in
``tools/server/server-schema.cpp`` ``make_llama_cmpl_schema``. The translator reads it
(:mod:`lemoncore.translation`) and builds the client's answer itself, so nothing of it
reaches a client; an OpenAI-surface request is left as it came.
"""

from __future__ import annotations

from typing import Any

NAMING_SURFACES = frozenset({"/v1/messages"})  # the translated APIs with a stop_sequence


def ask_for_stop_word(endpoint: str, body: dict[str, Any], surface: str) -> None:
    """Have llama-server name the stop word of a translated ``surface`` request that
    gives stop sequences (idempotent)."""
    if endpoint == "/v1/chat/completions" and surface in NAMING_SURFACES and body.get("stop"):
        body["verbose"] = True
        body["response_fields"] = ["stopping_word"]
