"""Anthropic's Messages API over a chat-completions backend: pure translators.

:func:`to_chat` turns a ``POST /v1/messages`` body into a chat-completions body,
:func:`from_chat` a chat completion into Anthropic's ``message`` object, and
:class:`MessagesStream` a chat-completions SSE stream (parsed chunk by chunk) into
Anthropic's event stream. :func:`count_tokens_request` and :func:`count_tokens_reply` do
``/v1/messages/count_tokens`` with a one-token generation. What a chat completion cannot
express is a 400 :class:`LemonError` naming the field and the fix; what carries no
meaning for a local model (``metadata``, ``thinking``, ``service_tier``, cache
control) is dropped, and so are ``thinking`` blocks in the history and the backend's
``reasoning_content``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from lemoncore.errors import LemonError
from lemoncore.translation.walk import ChunkWalk

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                 "function_call": "tool_use", "content_filter": "refusal"}
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
_SERVER_SIDE = ("mcp_servers", "container")  # need Anthropic's servers: refused


def _refuse(message: str, param: str) -> LemonError:
    return LemonError(message, 400, param=param)


def _text_of(blocks: Any, param: str) -> str:
    """A string, or the text of a list of ``text`` blocks joined by newlines."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise _refuse(f"{param} must be a string or a list of text blocks", param)
    texts = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise _refuse(f"{param}[{i}] is a {kind!r} block; only text blocks can be "
                          "translated here: send the content as text", f"{param}[{i}].type")
        texts.append(str(block.get("text", "")))
    return "\n".join(texts)


def _image(block: dict[str, Any], param: str) -> dict[str, Any]:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        raise _refuse(f"{param}.source.type {source.get('type')!r} cannot be translated: send "
                      "the image as base64 or url", f"{param}.source.type")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: dict[str, Any], param: str) -> dict[str, Any]:
    text = _text_of(block.get("content", ""), f"{param}.content")
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}


def _message(msg: Any, param: str) -> list[dict[str, Any]]:
    """One Anthropic message → chat messages (tool results first, as ``tool`` messages)."""
    role = msg.get("role") if isinstance(msg, dict) else None
    if role not in ("user", "assistant"):
        raise _refuse(f"{param}.role must be 'user' or 'assistant' (system prompts go in "
                      "the top-level 'system')", f"{param}.role")
    content = msg.get("content", "")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise _refuse(f"{param}.content must be a string or a list of blocks", param)
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        where = f"{param}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind in ("thinking", "redacted_thinking"):
            continue
        elif kind == "image" and role == "user":
            parts.append(_image(block, where))
        elif kind == "tool_result" and role == "user":
            out.append(_tool_result(block, where))
        elif kind == "tool_use" and role == "assistant":
            calls.append({"id": str(block.get("id", "")), "type": "function", "function": {
                "name": str(block.get("name", "")),
                "arguments": json.dumps(block.get("input", {}))}})
        else:
            raise _refuse(f"{where} is a {kind!r} block in a {role} message, which cannot be "
                          "translated to a chat completion: send text, image, tool_use or "
                          "tool_result blocks", f"{where}.type")
    if any(p["type"] != "text" for p in parts):
        out.append({"role": role, "content": parts})
    elif parts or calls or not out:
        text = "\n".join(p["text"] for p in parts)
        out.append({"role": role, "content": text if text or not calls else None})
        if calls:
            out[-1]["tool_calls"] = calls
    return out


def _tool(tool: Any, i: int) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise _refuse(f"tools[{i}] is a server tool ({kind!r}) that a local model cannot run: "
                      "declare client tools with name, description and input_schema",
                      f"tools[{i}].type")
    function = {"name": tool.get("name"), "parameters": tool.get("input_schema", {})}
    if "description" in tool:
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if kind in _TOOL_CHOICES:
        return _TOOL_CHOICES[kind]
    raise _refuse(f"tool_choice type {kind!r} is unknown: use auto, any, tool or none",
                  "tool_choice.type")


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages request → a chat-completions request (see the module doc)."""
    for key in _SERVER_SIDE:
        if body.get(key):
            raise _refuse(f"{key} needs Anthropic's servers; lemoncore cannot provide them: "
                          "remove it", key)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _refuse("messages must be a list of {role, content} messages", "messages")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": []}
    if body.get("system"):
        chat["messages"].append({"role": "system", "content": _text_of(body["system"], "system")})
    for i, msg in enumerate(messages):
        chat["messages"].extend(_message(msg, f"messages[{i}]"))
    for key in ("max_tokens", "temperature", "top_p", "top_k"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("stop_sequences"):
        chat["stop"] = list(body["stop_sequences"])
    if body.get("stream"):
        chat["stream"], chat["stream_options"] = True, {"include_usage": True}
    if body.get("tools"):
        chat["tools"] = [_tool(tool, i) for i, tool in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
        if body["tool_choice"].get("disable_parallel_tool_use"):
            chat["parallel_tool_calls"] = False
    return chat


def _stop(finish_reason: Any, choice: dict[str, Any], has_tools: bool) -> tuple[str, Any]:
    """``(stop_reason, stop_sequence)``. A stop sequence is known only when the backend
    names the string it matched (vLLM's ``stop_reason``); otherwise a stop is ``end_turn``."""
    if has_tools and finish_reason in (None, "stop", "tool_calls"):
        return "tool_use", None
    matched = choice.get("stop_reason")
    if finish_reason == "stop" and isinstance(matched, str) and matched:
        return "stop_sequence", matched
    return _STOP_REASONS.get(str(finish_reason), "end_turn"), None


def _usage(usage: Any) -> dict[str, int]:
    """Anthropic usage from chat usage; tokens read from the prompt cache are counted
    apart, as Anthropic does (``input_tokens`` excludes them)."""
    usage = usage if isinstance(usage, dict) else {}
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {"input_tokens": int(usage.get("prompt_tokens") or 0) - cached,
            "output_tokens": int(usage.get("completion_tokens") or 0),
            "cache_read_input_tokens": cached}


def _tool_input(arguments: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}


def _message_id(chat_id: Any) -> str:
    suffix = str(chat_id).removeprefix("chatcmpl-") if chat_id else uuid.uuid4().hex
    return f"msg_{suffix}"


def from_chat(chat: dict[str, Any], model: str) -> dict[str, Any]:
    """A chat completion → Anthropic's ``message``. Tool-call arguments that are not a
    JSON object become ``input: {"arguments": <raw string>}``."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    calls = message.get("tool_calls") or []
    for call in calls:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                        "name": function.get("name", ""),
                        "input": _tool_input(function.get("arguments", "{}"))})
    stop_reason, stop_sequence = _stop(choice.get("finish_reason"), choice, bool(calls))
    return {"id": _message_id(chat.get("id")), "type": "message", "role": "assistant",
            "model": model, "content": content, "stop_reason": stop_reason,
            "stop_sequence": stop_sequence, "usage": _usage(chat.get("usage"))}


def count_tokens_request(body: dict[str, Any]) -> dict[str, Any]:
    """A ``count_tokens`` body → a chat request generating one token, whose
    ``usage.prompt_tokens`` is the count."""
    chat = to_chat({**body, "stream": False})
    chat["max_tokens"] = 1
    return chat


def count_tokens_reply(chat: dict[str, Any]) -> dict[str, Any]:
    """The answer to :func:`count_tokens_request` → ``{"input_tokens": N}``."""
    usage = chat.get("usage") or {}
    if not isinstance(usage.get("prompt_tokens"), int):
        raise LemonError("the backend answered without usage.prompt_tokens, so the tokens "
                         "cannot be counted", 502, type_="api_error")
    return {"input_tokens": usage["prompt_tokens"]}


def _event(kind: str, data: dict[str, Any]) -> bytes:
    payload = json.dumps({"type": kind, **data}, ensure_ascii=False, separators=(",", ":"))
    return f"event: {kind}\ndata: {payload}\n\n".encode()


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
        self._usage: dict[str, int] = _usage(None)
        self._blocks = 0  # content blocks started so far
        self._open: int | None = None  # index of the open block
        self._text: int | None = None  # index of the open text block
        self._tools: dict[int, int] = {}  # chat tool-call index → block index
        self._finish: Any = None
        self._choice: dict[str, Any] = {}

    def start(self, chunk: dict[str, Any]) -> bytes:
        message: dict[str, Any] = {
            "id": _message_id(chunk.get("id")), "type": "message", "role": "assistant",
            "model": self.model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": self._usage}
        return _event("message_start", {"message": message})

    def _close(self) -> bytes:
        index, self._open, self._text = self._open, None, None
        return b"" if index is None else _event("content_block_stop", {"index": index})

    def _begin(self, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._open, self._blocks = self._blocks, self._blocks + 1
        return out + _event("content_block_start", {"index": self._open, "content_block": block})

    def tool_call(self, call: dict[str, Any]) -> bytes:
        out, function = b"", call.get("function") or {}
        key = int(call.get("index", len(self._tools)))
        if key not in self._tools:
            out = self._begin({"type": "tool_use", "id": call.get("id") or
                               f"toolu_{uuid.uuid4().hex}",
                               "name": function.get("name") or "", "input": {}})
            self._tools[key] = self._blocks - 1
        if function.get("arguments"):
            out += _event("content_block_delta", {"index": self._tools[key], "delta": {
                "type": "input_json_delta", "partial_json": function["arguments"]}})
        return out

    def usage(self, usage: Any) -> None:
        self._usage = _usage(usage)

    def text(self, text: str) -> bytes:
        out = b""
        if self._text is None:
            out = self._begin({"type": "text", "text": ""})
            self._text = self._open
        return out + _event("content_block_delta", {"index": self._text, "delta": {
            "type": "text_delta", "text": text}})

    def finished(self, choice: dict[str, Any]) -> None:
        self._finish, self._choice = choice["finish_reason"], choice

    def finish(self) -> bytes:
        """At the upstream's ``[DONE]``: close the open block, then ``message_delta``
        (stop reason, usage) and ``message_stop``."""
        if self._done:
            return b""
        out = self.started({}) + self._close()
        self._done = True
        stop_reason, stop_sequence = _stop(self._finish, self._choice, bool(self._tools))
        return out + _event("message_delta", {
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": self._usage}) + _event("message_stop", {})

    def fail(self, message: str) -> bytes:
        """Anthropic's ``error`` event; nothing follows it."""
        self._done = True
        return _event("error", {"error": {"type": "api_error", "message": message}})
