"""OpenAI's Responses API over a chat-completions backend: pure translators.

:func:`to_chat` turns a ``POST /v1/responses`` body into a chat-completions body,
:func:`from_chat` a chat completion into a ``response`` object, and
:class:`ResponsesStream` a chat-completions SSE stream (parsed chunk by chunk) into the
Responses event stream. lemoncore keeps no state, so what needs it
(``previous_response_id``, ``conversation``, ``background``, ``item_reference``) is a
400, as are hosted tools, file inputs and other input items a chat completion cannot
express. ``reasoning`` items in the input and the backend's ``reasoning_content`` are
dropped; ``store``, ``include``, ``metadata``, ``reasoning`` and ``truncation`` are
ignored (the answer echoes what the client sent).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from lemoncore.errors import LemonError
from lemoncore.translation.walk import ChunkWalk

_STATELESS = ("lemoncore keeps no conversation state: send the whole conversation in "
              "'input' (earlier output items included) instead")
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _refuse(message: str, param: str) -> LemonError:
    return LemonError(message, 400, param=param)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _parts(content: Any, param: str) -> str | list[dict[str, Any]]:
    """Responses content → chat content: a string when it is all text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _refuse(f"{param} must be a string or a list of content parts", param)
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text"):
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image" and part.get("image_url"):
            image = {"url": part["image_url"]}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise _refuse(f"{param}[{i}] ({kind!r}) cannot be translated to a chat "
                          "completion: send input_text, or input_image with an image_url "
                          "(a URL or a data: URI)", f"{param}[{i}]")
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _input(items: Any) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise _refuse("input must be a string or a list of items", "input")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message" and item.get("role") not in _ROLES:
            raise _refuse(f"{where}.role {item.get('role')!r} is unknown: use user, "
                          "assistant, system or developer", f"{where}.role")
        if kind == "message":
            content = _parts(item.get("content", ""), f"{where}.content")
            role = _ROLES[item["role"]]
            if role != "user" and not isinstance(content, str):
                raise _refuse(f"{where}: images are only accepted in user messages", where)
            out.append({"role": role, "content": content})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function", "function": {
                "name": item.get("name"), "arguments": item.get("arguments", "{}")}}
            last = out[-1] if out else {}
            if last.get("role") == "assistant":  # text and calls of one turn: one message
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output", "")
            text = output if isinstance(output, str) else _parts(output, f"{where}.output")
            if not isinstance(text, str):
                raise _refuse(f"{where}.output: a tool output can only be text here", where)
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind == "reasoning":
            continue
        elif kind == "item_reference":
            raise _refuse(f"{where} is an item_reference; {_STATELESS}", where)
        else:
            raise _refuse(f"{where} ({kind!r}) cannot be translated to a chat completion: "
                          "send messages, function_call and function_call_output items",
                          f"{where}.type")
    return out


def _tool(tool: Any, i: int) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise _refuse(f"tools[{i}] is a {kind!r} tool, which a local model cannot run: "
                      "declare function tools", f"tools[{i}].type")
    function = {"name": tool.get("name"), "parameters": tool.get("parameters") or {}}
    for key in ("description", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise _refuse(f"tool_choice {choice!r} cannot be translated: use auto, none, required "
                  "or {'type': 'function', 'name': ...}", "tool_choice")


def _format(fmt: dict[str, Any]) -> dict[str, Any] | None:
    if fmt.get("type") == "json_schema":
        schema = {"name": fmt.get("name", "response"), "schema": fmt.get("schema", {})}
        for key in ("strict", "description"):
            if fmt.get(key) is not None:
                schema[key] = fmt[key]
        return {"type": "json_schema", "json_schema": schema}
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type", "text") == "text":
        return None
    raise _refuse(f"text.format type {fmt.get('type')!r} is unknown: use text, json_schema "
                  "or json_object", "text.format.type")


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request → a chat-completions request (see the module doc)."""
    for key in ("previous_response_id", "conversation", "background"):
        if body.get(key):
            raise _refuse(f"{key} is not supported: {_STATELESS}", key)
    chat: dict[str, Any] = {"model": body.get("model"), "messages": []}
    if body.get("instructions"):
        chat["messages"].append({"role": "system", "content": str(body["instructions"])})
    chat["messages"].extend(_input(body.get("input", "")))
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    for key in ("temperature", "top_p", "parallel_tool_calls"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("stream"):
        chat["stream"], chat["stream_options"] = True, {"include_usage": True}
    if body.get("tools"):
        chat["tools"] = [_tool(tool, i) for i, tool in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    fmt = (body.get("text") or {}).get("format")
    if isinstance(fmt, dict) and (response_format := _format(fmt)) is not None:
        chat["response_format"] = response_format
    return chat


def _usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(
        usage.get("completion_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {"input_tokens": prompt, "output_tokens": completion,
            "total_tokens": prompt + completion,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": reasoning}}


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [],
                         "logprobs": []}]}


def _call_item(item_id: str, call_id: str, name: str, arguments: str,
               status: str) -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def _response(body: dict[str, Any], resp_id: str, created: float, status: str,
              output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
    """The ``response`` object, echoing the request's settings as the API does."""
    return {
        "id": resp_id, "object": "response", "created_at": created, "status": status,
        "error": None, "model": body.get("model"), "output": output, "usage": usage,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete"
        else None,
        "instructions": body.get("instructions"), "metadata": body.get("metadata") or {},
        "max_output_tokens": body.get("max_output_tokens"),
        "temperature": body.get("temperature"), "top_p": body.get("top_p"),
        "tools": body.get("tools") or [], "tool_choice": body.get("tool_choice", "auto"),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "text": body.get("text") or {"format": {"type": "text"}},
        "previous_response_id": None, "reasoning": body.get("reasoning"),
        "truncation": body.get("truncation", "disabled"), "user": body.get("user"),
    }


def from_chat(chat: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion → a ``response``; ``incomplete`` when the token limit cut it."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    output: list[dict[str, Any]] = []
    if message.get("content"):
        output.append(_message_item(_id("msg"), message["content"], status))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append(_call_item(_id("fc"), call.get("id") or _id("call"),
                                 function.get("name", ""), function.get("arguments", ""),
                                 "completed"))
    resp_id = f"resp_{str(chat['id']).removeprefix('chatcmpl-')}" if chat.get("id") \
        else _id("resp")
    return _response(body, resp_id, chat.get("created") or int(time.time()), status, output,
                     _usage(chat.get("usage")))


class ResponsesStream(ChunkWalk):
    """Chat-completion stream chunks → the Responses SSE events, one chunk at a time.

    Text and each tool call (by its chat ``index``) become output items in the order
    they start; a new item closes the one before. Usage is taken from whichever chunk
    carries it; without one it counts as 0. A chunk carrying ``error`` ends the stream
    as :meth:`fail` does.
    """

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__()
        self.body = body
        self._id, self._created = _id("resp"), int(time.time())
        self._seq = 0
        self._items: list[dict[str, Any]] = []  # output items, by output_index
        self._open: int | None = None
        self._text: int | None = None  # output_index of the open message item
        self._calls: dict[int, int] = {}  # chat tool-call index → output_index
        self._usage: dict[str, Any] = _usage(None)
        self._length = False

    def _event(self, kind: str, **data: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._seq, **data}
        self._seq += 1
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        return f"event: {kind}\ndata: {text}\n\n".encode()

    def _response(self, status: str) -> dict[str, Any]:
        return _response(self.body, self._id, self._created, status, self._items,
                         self._usage if status != "in_progress" else None)

    def _close(self, status: str = "completed") -> bytes:
        index, self._open, self._text = self._open, None, None
        if index is None:
            return b""
        item, out = self._items[index], b""
        item["status"] = status
        if item["type"] == "message":
            part, where = item["content"][0], {"item_id": item["id"], "output_index": index}
            out = self._event("response.output_text.done", **where, content_index=0,
                              text=part["text"], logprobs=[])
            out += self._event("response.content_part.done", **where, content_index=0,
                               part=part)
        else:
            out = self._event("response.function_call_arguments.done", item_id=item["id"],
                              output_index=index, name=item["name"],
                              arguments=item["arguments"])
        return out + self._event("response.output_item.done", output_index=index, item=item)

    def _add(self, item: dict[str, Any]) -> bytes:
        out = self._close()
        self._open = len(self._items)
        self._items.append(item)
        added = {**item, "content": []} if item["type"] == "message" else item
        return out + self._event("response.output_item.added", output_index=self._open,
                                 item=added)

    def text(self, text: str) -> bytes:
        out, index = b"", self._text
        if index is None:
            item = _message_item(_id("msg"), "", "in_progress")
            out = self._add(item)
            self._text = index = len(self._items) - 1
            out += self._event("response.content_part.added", item_id=item["id"],
                               output_index=index, content_index=0, part=item["content"][0])
        item = self._items[index]
        item["content"][0]["text"] += text
        return out + self._event("response.output_text.delta", item_id=item["id"],
                                 output_index=index, content_index=0, delta=text, logprobs=[])

    def tool_call(self, call: dict[str, Any]) -> bytes:
        out, function = b"", call.get("function") or {}
        key = int(call.get("index", len(self._calls)))
        if key not in self._calls:
            out = self._add(_call_item(_id("fc"), call.get("id") or _id("call"),
                                       function.get("name") or "", "", "in_progress"))
            self._calls[key] = len(self._items) - 1
        index = self._calls[key]
        if function.get("arguments"):
            item = self._items[index]
            item["arguments"] += function["arguments"]
            out += self._event("response.function_call_arguments.delta", item_id=item["id"],
                               output_index=index, delta=function["arguments"])
        return out

    def start(self, chunk: dict[str, Any]) -> bytes:
        return (self._event("response.created", response=self._response("in_progress"))
                + self._event("response.in_progress", response=self._response("in_progress")))

    def usage(self, usage: Any) -> None:
        self._usage = _usage(usage)

    def finished(self, choice: dict[str, Any]) -> None:
        self._length = choice["finish_reason"] == "length"

    def finish(self) -> bytes:
        """At the upstream's ``[DONE]``: close the open item, then ``response.completed``
        (``response.incomplete`` when the token limit cut it) with the whole response."""
        if self._done:
            return b""
        out = self.started({})
        self._done = True
        status = "incomplete" if self._length else "completed"
        out += self._close(status)
        return out + self._event(f"response.{status}", response=self._response(status))

    def fail(self, message: str) -> bytes:
        """The Responses API's ``error`` event; nothing follows it."""
        self._done = True
        return self._event("error", code="server_error", message=message, param=None)
