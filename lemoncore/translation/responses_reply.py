"""OpenAI Responses answers from chat completions: :func:`from_chat` turns a chat
completion into a ``response`` object, and :class:`ResponsesStream` a chat-completions
SSE stream (parsed chunk by chunk) into the Responses event stream; both echo the
request's settings as the API does. Requests are translated by :mod:`.responses`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from lemoncore.translation.client_wire import (
    FunctionCallItem,
    ItemStatus,
    OutputItem,
    OutputMessage,
    ResponseObject,
    ResponsesEvent,
    ResponseUsage,
)
from lemoncore.translation.walk import BACKEND_FAILED, ChunkWalk
from lemoncore.translation.wire import (
    ChatChunk,
    ChatCompletion,
    ChunkChoice,
    DeltaToolCall,
    Usage,
)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _usage(usage: Usage | None) -> ResponseUsage:
    usage = usage if isinstance(usage, dict) else {}
    prompt, completion = (
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
    )
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": prompt + completion,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": reasoning},
    }


def _message_item(item_id: str, text: str, status: ItemStatus) -> OutputMessage:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: ItemStatus
) -> FunctionCallItem:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _response(
    body: Mapping[str, Any],
    resp_id: str,
    created: float,
    status: ItemStatus,
    output: list[OutputItem],
    usage: ResponseUsage | None,
) -> ResponseObject:
    """The ``response`` object, echoing the request's settings as the API does, and its
    defaults for what the request left out; ``temperature`` and ``top_p`` are ``None``
    then: the engine's own defaults apply, not the API's (1.0)."""
    return {
        "id": resp_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "model": body.get("model"),
        "output": output,
        "usage": usage,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata") or {},
        "max_output_tokens": body.get("max_output_tokens"),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice", "auto"),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "text": {"format": {"type": "text"}, **(body.get("text") or {})},
        "previous_response_id": None,
        "reasoning": body.get("reasoning"),
        "truncation": body.get("truncation", "disabled"),
        "user": body.get("user"),
    }


def from_chat(chat: ChatCompletion, body: Mapping[str, Any]) -> ResponseObject:
    """A chat completion (the engine's JSON) → a ``response`` for the request ``body``;
    ``incomplete`` when the token limit cut it."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    status: ItemStatus = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    output: list[OutputItem] = []
    if content := message.get("content"):
        output.append(_message_item(_id("msg"), content, status))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append(
            _call_item(
                _id("fc"),
                call.get("id") or _id("call"),
                function.get("name", ""),
                function.get("arguments", ""),
                "completed",
            )
        )
    resp_id = f"resp_{str(chat['id']).removeprefix('chatcmpl-')}" if chat.get("id") else _id("resp")
    return _response(
        body,
        resp_id,
        chat.get("created") or int(time.time()),
        status,
        output,
        _usage(chat.get("usage")),
    )


class ResponsesStream(ChunkWalk):
    """Chat-completion stream chunks → the Responses SSE events, one chunk at a time.

    Text and each tool call (by its chat ``index``) become output items in the order
    they start; a new item closes the one before. Usage is taken from whichever chunk
    carries it; without one it counts as 0. A chunk carrying ``error`` ends the stream
    as :meth:`fail` does.
    """

    def __init__(self, body: Mapping[str, Any]) -> None:
        """``body``: the request as the client sent it, echoed in each ``response``."""
        super().__init__()
        self.body = body
        self._id, self._created = _id("resp"), int(time.time())
        self._seq = 0
        self._items: list[OutputItem] = []  # output items, by output_index
        self._open: int | None = None
        self._text: tuple[int, OutputMessage] | None = None  # the open message item
        self._calls: dict[int, tuple[int, FunctionCallItem]] = {}  # by chat tool-call index
        self._usage = _usage(None)
        self._length = False

    def _next(self) -> int:
        """The next event's ``sequence_number``."""
        self._seq += 1
        return self._seq - 1

    def _event(self, event: ResponsesEvent) -> bytes:
        text = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
        return f"event: {event['type']}\ndata: {text}\n\n".encode()

    def _response(self, status: ItemStatus) -> ResponseObject:
        return _response(
            self.body,
            self._id,
            self._created,
            status,
            self._items,
            self._usage if status != "in_progress" else None,
        )

    def _close(self, status: ItemStatus = "completed") -> bytes:
        index, self._open, self._text = self._open, None, None
        if index is None:
            return b""
        item = self._items[index]
        item["status"] = status
        if item["type"] == "message":
            part, item_id = item["content"][0], item["id"]
            out = self._event(
                {
                    "type": "response.output_text.done",
                    "sequence_number": self._next(),
                    "item_id": item_id,
                    "output_index": index,
                    "content_index": 0,
                    "text": part["text"],
                    "logprobs": [],
                }
            )
            out += self._event(
                {
                    "type": "response.content_part.done",
                    "sequence_number": self._next(),
                    "item_id": item_id,
                    "output_index": index,
                    "content_index": 0,
                    "part": part,
                }
            )
        else:
            out = self._event(
                {
                    "type": "response.function_call_arguments.done",
                    "sequence_number": self._next(),
                    "item_id": item["id"],
                    "output_index": index,
                    "name": item["name"],
                    "arguments": item["arguments"],
                }
            )
        return out + self._event(
            {
                "type": "response.output_item.done",
                "sequence_number": self._next(),
                "output_index": index,
                "item": item,
            }
        )

    def _add(self, item: OutputItem) -> bytes:
        out = self._close()
        self._open = len(self._items)
        self._items.append(item)
        added: OutputItem = {**item, "content": []} if item["type"] == "message" else item
        return out + self._event(
            {
                "type": "response.output_item.added",
                "sequence_number": self._next(),
                "output_index": self._open,
                "item": added,
            }
        )

    def text(self, text: str) -> bytes:
        out = b""
        if self._text is None:
            item = _message_item(_id("msg"), "", "in_progress")
            out = self._add(item)
            self._text = (len(self._items) - 1, item)
            out += self._event(
                {
                    "type": "response.content_part.added",
                    "sequence_number": self._next(),
                    "item_id": item["id"],
                    "output_index": self._text[0],
                    "content_index": 0,
                    "part": item["content"][0],
                }
            )
        index, item = self._text
        item["content"][0]["text"] += text
        return out + self._event(
            {
                "type": "response.output_text.delta",
                "sequence_number": self._next(),
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "delta": text,
                "logprobs": [],
            }
        )

    def tool_call(self, call: DeltaToolCall) -> bytes:
        out, function = b"", call.get("function") or {}
        key = int(call.get("index", len(self._calls)))
        if key not in self._calls:
            item = _call_item(
                _id("fc"),
                call.get("id") or _id("call"),
                function.get("name") or "",
                "",
                "in_progress",
            )
            out = self._add(item)
            self._calls[key] = (len(self._items) - 1, item)
        index, item = self._calls[key]
        if arguments := function.get("arguments"):
            item["arguments"] += arguments
            out += self._event(
                {
                    "type": "response.function_call_arguments.delta",
                    "sequence_number": self._next(),
                    "item_id": item["id"],
                    "output_index": index,
                    "delta": arguments,
                }
            )
        return out

    def start(self, chunk: ChatChunk) -> bytes:
        return self._event(
            {
                "type": "response.created",
                "sequence_number": self._next(),
                "response": self._response("in_progress"),
            }
        ) + self._event(
            {
                "type": "response.in_progress",
                "sequence_number": self._next(),
                "response": self._response("in_progress"),
            }
        )

    def usage(self, usage: Usage) -> None:
        self._usage = _usage(usage)

    def finished(self, choice: ChunkChoice) -> None:
        self._length = choice["finish_reason"] == "length"

    def finish(self) -> bytes:
        """At the upstream's ``[DONE]``: close the open item, then ``response.completed``
        (``response.incomplete`` when the token limit cut it) with the whole response."""
        if self._done:
            return b""
        out = self.started({})
        self._done = True
        status: ItemStatus = "incomplete" if self._length else "completed"
        out += self._close(status)
        return out + self._event(
            {
                "type": "response.incomplete" if self._length else "response.completed",
                "sequence_number": self._next(),
                "response": self._response(status),
            }
        )

    def fail(self, message: str, status: int = BACKEND_FAILED) -> bytes:
        """The Responses API's ``error`` event, code ``server_error`` (``status`` is not
        used); nothing follows it."""
        self._done = True
        return self._event(
            {
                "type": "error",
                "sequence_number": self._next(),
                "code": "server_error",
                "message": message,
                "param": None,
            }
        )
