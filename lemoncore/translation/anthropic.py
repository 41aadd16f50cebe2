"""Anthropic's Messages API over a chat-completions backend: pure translators.

:func:`to_chat` turns a ``POST /v1/messages`` body into a chat-completions body, and
:func:`count_tokens_request` with
:func:`~lemoncore.translation.anthropic_reply.count_tokens_reply` do
``/v1/messages/count_tokens`` with a one-token generation;
:func:`~lemoncore.translation.anthropic_reply.from_chat` (a chat completion into
Anthropic's ``message`` object) and
:class:`~lemoncore.translation.anthropic_reply.MessagesStream` (a chat-completions SSE
stream, parsed chunk by chunk, into Anthropic's event stream) live in
:mod:`.anthropic_reply` and are importable from here. What a chat completion cannot
express is a 400 :class:`LemonError` naming the field and the fix; what carries no
meaning for a local model (``metadata``, ``thinking``, ``service_tier``, cache
control) is dropped, and so are ``thinking`` blocks in the history and the backend's
``reasoning_content``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lemoncore.errors import LemonError
from lemoncore.translation.anthropic_reply import MessagesStream, count_tokens_reply, from_chat
from lemoncore.translation.wire import (
    ChatMessage,
    ChatRequest,
    ContentPart,
    FunctionDefinition,
    ImagePart,
    Tool,
    ToolCall,
    ToolChoice,
)

__all__ = ["MessagesStream", "count_tokens_reply", "count_tokens_request", "from_chat",
           "to_chat"]

_TOOL_CHOICES: dict[str, ToolChoice] = {"auto": "auto", "any": "required", "none": "none"}
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


def _image(block: Mapping[str, Any], param: str) -> ImagePart:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        raise _refuse(f"{param}.source.type {source.get('type')!r} cannot be translated: send "
                      "the image as base64 or url", f"{param}.source.type")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: Mapping[str, Any], param: str) -> ChatMessage:
    text = _text_of(block.get("content", ""), f"{param}.content")
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}


def _message(msg: Any, param: str) -> list[ChatMessage]:
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
    out: list[ChatMessage] = []
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
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
    texts = [p["text"] for p in parts if p["type"] == "text"]
    if len(texts) < len(parts):
        out.append({"role": role, "content": parts})
    elif parts or calls or not out:
        text = "\n".join(texts)
        out.append({"role": role, "content": text if text or not calls else None})
        if calls:
            out[-1]["tool_calls"] = calls
    return out


def _tool(tool: Any, i: int) -> Tool:
    kind = tool.get("type", "custom") if isinstance(tool, dict) else None
    if kind != "custom":
        raise _refuse(f"tools[{i}] is a server tool ({kind!r}) that a local model cannot run: "
                      "declare client tools with name, description and input_schema",
                      f"tools[{i}].type")
    function: FunctionDefinition = {"name": tool.get("name"),
                                    "parameters": tool.get("input_schema", {})}
    if "description" in tool:
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> ToolChoice:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if kind in _TOOL_CHOICES:
        return _TOOL_CHOICES[kind]
    raise _refuse(f"tool_choice type {kind!r} is unknown: use auto, any, tool or none",
                  "tool_choice.type")


def to_chat(body: Mapping[str, Any]) -> ChatRequest:
    """An Anthropic Messages request (the client's JSON body) → a chat-completions request
    (see the module doc)."""
    for key in _SERVER_SIDE:
        if body.get(key):
            raise _refuse(f"{key} needs Anthropic's servers; lemoncore cannot provide them: "
                          "remove it", key)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _refuse("messages must be a list of {role, content} messages", "messages")
    chat: ChatRequest = {"model": body.get("model"), "messages": []}
    if body.get("system"):
        chat["messages"].append({"role": "system", "content": _text_of(body["system"], "system")})
    for i, msg in enumerate(messages):
        chat["messages"].extend(_message(msg, f"messages[{i}]"))
    for setting in ("max_tokens", "temperature", "top_p", "top_k"):
        if body.get(setting) is not None:
            chat[setting] = body[setting]
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


def count_tokens_request(body: Mapping[str, Any]) -> ChatRequest:
    """A ``count_tokens`` body → a chat request generating one token, whose
    ``usage.prompt_tokens`` is the count."""
    chat = to_chat({**body, "stream": False})
    chat["max_tokens"] = 1
    return chat
