"""Anthropic Messages answers from chat completions: :func:`from_chat` turns a chat
completion into Anthropic's ``message`` object, :class:`MessagesStream` a
chat-completions SSE stream (parsed chunk by chunk) into Anthropic's event stream, and
:func:`count_tokens_reply` the answer to a one-token generation into a token count.
Requests are translated by :mod:`.anthropic`.
"""

from __future__ import annotations

import json
import uuid

from lemoncore.api.shapes import anthropic_type
from lemoncore.errors import LemonError
from lemoncore.translation.client_wire import (
    AnthropicMessage,
    AnthropicUsage,
    ContentBlock,
    MessagesEvent,
    StopReason,
    TokensCount,
)
from lemoncore.translation.walk import BACKEND_FAILED, ChunkWalk
from lemoncore.translation.wire import (
    ChatChunk,
    ChatCompletion,
    ChunkChoice,
    DeltaToolCall,
    Usage,
    Verbose,
)

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def _matched(stop_reason: object, verbose: Verbose | None) -> str | None:
    """The stop string that ended the answer, where the engine names it: vLLM's choice
    ``stop_reason`` (a string; a token id is no stop sequence) or llama-server's
    ``__verbose.stopping_word`` (:class:`~lemoncore.translation.wire.Verbose`)."""
    if isinstance(stop_reason, str) and stop_reason:
        return stop_reason
    word = verbose.get("stopping_word") if isinstance(verbose, dict) else None
    return word if isinstance(word, str) and word else None


def _stop(
    finish_reason: str | None, matched: str | None, has_tools: bool
) -> tuple[StopReason, str | None]:
    """``(stop_reason, stop_sequence)``. A stop sequence is known only when the engine
    names the string it matched (:func:`_matched`); otherwise a stop is ``end_turn``."""
    if has_tools and finish_reason in (None, "stop", "tool_calls"):
        return "tool_use", None
    if finish_reason == "stop" and matched:
        return "stop_sequence", matched
    return _STOP_REASONS.get(str(finish_reason), "end_turn"), None


def _usage(usage: Usage | None) -> AnthropicUsage:
    """Anthropic usage from chat usage, in Anthropic's meaning: ``input_tokens`` excludes
    the prompt tokens the engine read from its cache, which are ``cache_read_input_tokens``:
    its ``prompt_tokens_details.cached_tokens`` (llama-server: the prefix it reused from the
    slot's KV cache, ``n_prompt_tokens_cache``, ``server-task.cpp`` ``usage_json_oaicompat``).
    An engine that reports none read none, and ``input_tokens`` is the whole prompt. Either
    way the two add up to the prompt, which ``count_tokens`` counts."""
    usage = usage if isinstance(usage, dict) else {}
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0) - cached,
        "output_tokens": int(usage.get("completion_tokens") or 0),
        "cache_read_input_tokens": cached,
    }


def _tool_input(arguments: object) -> dict[str, object]:
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}


def _message_id(chat_id: object) -> str:
    suffix = str(chat_id).removeprefix("chatcmpl-") if chat_id else uuid.uuid4().hex
    return f"msg_{suffix}"


def from_chat(chat: ChatCompletion, model: str) -> AnthropicMessage:
    """A chat completion (the engine's JSON) → Anthropic's ``message``. Tool-call
    arguments that are not a JSON object become ``input: {"arguments": <raw string>}``."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[ContentBlock] = []
    if text := message.get("content"):
        content.append({"type": "text", "text": text})
    calls = message.get("tool_calls") or []
    for call in calls:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                "name": function.get("name", ""),
                "input": _tool_input(function.get("arguments", "{}")),
            }
        )
    matched = _matched(choice.get("stop_reason"), chat.get("__verbose"))
    stop_reason, stop_sequence = _stop(choice.get("finish_reason"), matched, bool(calls))
    return {
        "id": _message_id(chat.get("id")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": _usage(chat.get("usage")),
    }


def count_tokens_reply(chat: ChatCompletion) -> TokensCount:
    """The answer to :func:`~lemoncore.translation.anthropic.count_tokens_request` →
    ``{"input_tokens": N}``."""
    usage = chat.get("usage") or {}
    prompt_tokens = usage.get("prompt_tokens")
    if not isinstance(prompt_tokens, int):
        raise LemonError(
            "the backend answered without usage.prompt_tokens, so the tokens cannot be counted",
            502,
            type_="api_error",
        )
    return {"input_tokens": prompt_tokens}


def _event(event: MessagesEvent) -> bytes:
    payload = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {payload}\n\n".encode()


class MessagesStream(ChunkWalk):
    """Chat-completion stream chunks → Anthropic's SSE events, one chunk at a time.

    Text and each tool call (by its chat ``index``) become content blocks in the order
    they start; a new block closes the one before. Usage is taken from whichever chunk
    carries it (normally the last, with ``choices: []``); without one it counts as 0.
    A chunk carrying ``error`` ends the stream as :meth:`fail` does.
    """

    def __init__(self, model: str) -> None:
        super().__init__()
        self.model = model
        self._usage = _usage(None)
        self._blocks = 0  # content blocks started so far
        self._open: int | None = None  # index of the open block
        self._text: int | None = None  # index of the open text block
        self._tools: dict[int, int] = {}  # chat tool-call index → block index
        self._finish: str | None = None
        self._matched: str | None = None  # the stop string the engine names

    def feed(self, chunk: ChatChunk) -> bytes:
        """As :meth:`ChunkWalk.feed`; llama-server's ``__verbose`` (on whichever chunk
        carries it) is kept for the stop sequence."""
        self._matched = _matched(None, chunk.get("__verbose")) or self._matched
        return super().feed(chunk)

    def start(self, chunk: ChatChunk) -> bytes:
        return _event(
            {
                "type": "message_start",
                "message": {
                    "id": _message_id(chunk.get("id")),
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": self._usage,
                },
            }
        )

    def _close(self) -> bytes:
        index, self._open, self._text = self._open, None, None
        return b"" if index is None else _event({"type": "content_block_stop", "index": index})

    def _begin(self, block: ContentBlock) -> bytes:
        out = self._close()
        self._open, self._blocks = self._blocks, self._blocks + 1
        return out + _event(
            {"type": "content_block_start", "index": self._open, "content_block": block}
        )

    def tool_call(self, call: DeltaToolCall) -> bytes:
        out, function = b"", call.get("function") or {}
        key = int(call.get("index", len(self._tools)))
        if key not in self._tools:
            out = self._begin(
                {
                    "type": "tool_use",
                    "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                    "name": function.get("name") or "",
                    "input": {},
                }
            )
            self._tools[key] = self._blocks - 1
        if arguments := function.get("arguments"):
            out += _event(
                {
                    "type": "content_block_delta",
                    "index": self._tools[key],
                    "delta": {"type": "input_json_delta", "partial_json": arguments},
                }
            )
        return out

    def usage(self, usage: Usage) -> None:
        self._usage = _usage(usage)

    def text(self, text: str) -> bytes:
        out, index = b"", self._text
        if index is None:
            out = self._begin({"type": "text", "text": ""})
            self._text = index = self._blocks - 1
        return out + _event(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": text},
            }
        )

    def finished(self, choice: ChunkChoice) -> None:
        self._finish = choice["finish_reason"]
        self._matched = _matched(choice.get("stop_reason"), None) or self._matched

    def finish(self) -> bytes:
        """At the upstream's ``[DONE]``: close the open block, then ``message_delta``
        (stop reason, usage) and ``message_stop``."""
        if self._done:
            return b""
        out = self.started({}) + self._close()
        self._done = True
        stop_reason, stop_sequence = _stop(self._finish, self._matched, bool(self._tools))
        return (
            out
            + _event(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": self._usage,
                }
            )
            + _event({"type": "message_stop"})
        )

    def fail(self, message: str, status: int = BACKEND_FAILED) -> bytes:
        """Anthropic's ``error`` event, the error's body as its API answers it (the type
        the HTTP ``status`` would have: ``invalid_request_error`` for a 400,
        ``overloaded_error`` for a 503, ...); nothing follows it, no ``message_stop``
        (Anthropic's streaming docs, "Error events"; Lemonade's
        ``stream_openai_sse_to_anthropic_sse`` in ``src/cpp/server/anthropic_api.cpp``
        likewise ends the stream there)."""
        self._done = True
        return _event(
            {"type": "error", "error": {"type": anthropic_type(status), "message": message}}
        )
