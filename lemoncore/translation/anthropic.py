"""Anthropic's Messages API over a chat-completions backend: pure translators.

:func:`to_chat` turns a ``POST /v1/messages`` body into a chat-completions body, and
:func:`count_tokens_request` with
:func:`~lemoncore.translation.anthropic_reply.count_tokens_reply` do
``/v1/messages/count_tokens`` with a one-token generation;
:func:`~lemoncore.translation.anthropic_reply.from_chat` (a chat completion into
Anthropic's ``message`` object) and
:class:`~lemoncore.translation.anthropic_reply.MessagesStream` (a chat-completions SSE
stream, parsed chunk by chunk, into Anthropic's event stream) live in
:mod:`.anthropic_reply` and are importable from here.

A request is checked as Anthropic's API checks it (the ``anthropic`` SDK's
``types/message_create_params.py``): ``messages`` a non-empty list, each with role
``user``, ``assistant`` or ``system`` (``SystemMessageParam``) and non-empty content
(the last, an assistant's prefill, excepted), content a string or a list of blocks of
the types that role holds; ``max_tokens`` an integer of at least 1 (``0``, which
Anthropic takes to pre-warm its prompt cache, is refused: lemoncore does not); the
settings' types. That, and what a chat completion cannot express (documents, server
tools), is a 400 :class:`LemonError` naming the field and the fix, which the Messages
endpoints answer as Anthropic's ``invalid_request_error``. ``output_config.format`` (a
JSON Schema) becomes chat's ``response_format``. What carries no meaning for a local
model (``metadata``, ``thinking``, ``service_tier``, cache control) is dropped, and so
are ``thinking`` blocks in the history and the backend's ``reasoning_content``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lemoncore.errors import LemonError
from lemoncore.translation.anthropic_reply import MessagesStream, count_tokens_reply, from_chat
from lemoncore.translation.checks import integer, name_of, number_within
from lemoncore.translation.checks import refuse as _refuse
from lemoncore.translation.wire import (
    ChatMessage,
    ChatRequest,
    ChatRole,
    ContentPart,
    FunctionDefinition,
    ImagePart,
    JSONSchemaFormat,
    Tool,
    ToolCall,
    ToolChoice,
)

__all__ = ["MessagesStream", "count_tokens_reply", "count_tokens_request", "from_chat", "to_chat"]

_TOOL_CHOICES: dict[str, ToolChoice] = {"auto": "auto", "any": "required", "none": "none"}
_SERVER_SIDE = ("mcp_servers", "container")  # need Anthropic's servers: refused
_ROLES: dict[str, ChatRole] = {"user": "user", "assistant": "assistant", "system": "system"}
# Block types Anthropic's API takes (anthropic/types/content_block_param.py) that a chat
# completion cannot carry: refused as such, apart from types no API knows.
_UNTRANSLATABLE = frozenset(
    {
        "document",
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "container_upload",
    }
)
_ROLE_BLOCKS = {"user": ("text", "image", "tool_result"), "assistant": ("text", "tool_use")}


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
            raise _refuse(
                f"{param}[{i}] is a {kind!r} block; only text blocks can be "
                "translated here: send the content as text",
                f"{param}[{i}].type",
            )
        texts.append(_text(block, f"{param}[{i}]"))
    return "\n".join(texts)


def _text(block: Mapping[str, Any], param: str) -> str:
    if not isinstance(text := block.get("text"), str):
        raise _refuse(f"{param}.text must be a string", f"{param}.text")
    return text


def _image(block: Mapping[str, Any], param: str) -> ImagePart:
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        raise _refuse(
            f"{param}.source.type {source.get('type')!r} cannot be translated: send "
            "the image as base64 or url",
            f"{param}.source.type",
        )
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: Mapping[str, Any], param: str) -> ChatMessage:
    text = _text_of(block.get("content", ""), f"{param}.content")
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}


def _tool_use(block: Mapping[str, Any], param: str) -> ToolCall:
    if not isinstance(block.get("input", {}), dict):
        raise _refuse(f"{param}.input must be an object", f"{param}.input")
    return {
        "id": str(block.get("id", "")),
        "type": "function",
        "function": {
            "name": str(block.get("name", "")),
            "arguments": json.dumps(block.get("input", {})),
        },
    }


def _unknown_block(kind: object, role: str, where: str) -> LemonError:
    """Why a block of type ``kind`` in a ``role`` message is refused."""
    if isinstance(kind, str) and kind in _UNTRANSLATABLE:
        why = (
            f"is a {kind!r} block, which a chat completion cannot carry to a local model: "
            "send its content as text blocks"
        )
    elif kind in ("text", "image", "tool_use", "tool_result"):
        why = (
            f"is a {kind!r} block, which a {role} message cannot hold (a {role} message "
            f"holds {', '.join(_ROLE_BLOCKS[role])} blocks)"
        )
    else:
        why = (
            f"has type {kind!r}, which is no content block type: send text, image, "
            "tool_use or tool_result blocks"
        )
    return _refuse(f"{where} {why}", f"{where}.type")


def _message(msg: Any, param: str, last: bool) -> list[ChatMessage]:
    """One Anthropic message → chat messages (tool results first, as ``tool`` messages).
    Content may be empty only in the last message, an assistant's (a prefill)."""
    role = msg.get("role") if isinstance(msg, dict) else None
    if not isinstance(role, str) or role not in _ROLES:
        raise _refuse(
            f"{param}.role must be 'user' or 'assistant' (or 'system'), not {role!r}",
            f"{param}.role",
        )
    content = msg.get("content")
    if content in ("", []) and not (last and role == "assistant"):
        raise _refuse(
            f"{param}: all messages must have non-empty content except for the "
            "optional final assistant message",
            f"{param}.content",
        )
    if role == "system":
        return [{"role": "system", "content": _text_of(content, f"{param}.content")}]
    if isinstance(content, str):
        return [{"role": _ROLES[role], "content": content}]
    if not isinstance(content, list):
        raise _refuse(
            f"{param}.content must be a string or a list of content blocks", f"{param}.content"
        )
    out: list[ChatMessage] = []
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(content):
        where = f"{param}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in ("thinking", "redacted_thinking"):
            continue
        if kind not in _ROLE_BLOCKS[role]:
            raise _unknown_block(kind, role, where)
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, where)})
        elif kind == "image":
            parts.append(_image(block, where))
        elif kind == "tool_result":
            out.append(_tool_result(block, where))
        else:
            calls.append(_tool_use(block, where))
    texts = [p["text"] for p in parts if p["type"] == "text"]
    if len(texts) < len(parts):
        out.append({"role": _ROLES[role], "content": parts})
    elif parts or calls or not out:
        text = "\n".join(texts)
        out.append({"role": _ROLES[role], "content": text if text or not calls else None})
        if calls:
            out[-1]["tool_calls"] = calls
    return out


def _tool(tool: Any, i: int) -> Tool:
    kind = tool.get("type", "custom") if isinstance(tool, dict) else None
    if kind != "custom":
        raise _refuse(
            f"tools[{i}] is a server tool ({kind!r}) that a local model cannot run: "
            "declare client tools with name, description and input_schema",
            f"tools[{i}].type",
        )
    if not isinstance(tool.get("name"), str) or not isinstance(tool.get("input_schema"), dict):
        raise _refuse(
            f"tools[{i}] needs a 'name' (a string) and an 'input_schema' (a JSON Schema object)",
            f"tools[{i}]",
        )
    function: FunctionDefinition = {"name": tool["name"], "parameters": tool["input_schema"]}
    if "description" in tool:
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> ToolChoice:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        return {
            "type": "function",
            "function": {"name": name_of(choice.get("name"), "tool_choice.name")},
        }
    if isinstance(kind, str) and kind in _TOOL_CHOICES:
        return _TOOL_CHOICES[kind]
    raise _refuse(
        f"tool_choice type {kind!r} is unknown: use auto, any, tool or none", "tool_choice.type"
    )


def _settings(body: Mapping[str, Any], chat: ChatRequest) -> None:
    """The sampling settings and stop sequences, checked as Anthropic's API does
    (``temperature`` and ``top_p`` from 0 to 1, ``top_k`` an integer of at least 0)."""
    for name in ("temperature", "top_p"):
        if (value := number_within(body, name, 0, 1)) is not None:
            chat[name] = value
    if body.get("top_k") is not None:
        if (top_k := integer(body["top_k"])) is None or top_k < 0:
            raise _refuse(f"top_k must be an integer of at least 0, not {body['top_k']!r}", "top_k")
        chat["top_k"] = top_k
    stops = body.get("stop_sequences")
    if stops is not None and not (
        isinstance(stops, list) and all(isinstance(s, str) for s in stops)
    ):
        raise _refuse("stop_sequences must be a list of strings", "stop_sequences")
    if stops:
        chat["stop"] = list(stops)


def _output_format(config: Any) -> JSONSchemaFormat | None:
    """``output_config.format`` (Anthropic's structured outputs) → ``response_format``."""
    fmt = config.get("format") if isinstance(config, dict) else None
    if fmt is None:
        return None
    if (
        not isinstance(fmt, dict)
        or fmt.get("type") != "json_schema"
        or not isinstance(fmt.get("schema"), dict)
    ):
        raise _refuse(
            "output_config.format must be {'type': 'json_schema', 'schema': {...}}",
            "output_config.format",
        )
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


def _translate(body: Mapping[str, Any]) -> ChatRequest:
    """The request, ``max_tokens`` aside (see :func:`to_chat`)."""
    for key in _SERVER_SIDE:
        if body.get(key):
            raise _refuse(
                f"{key} needs Anthropic's servers; lemoncore cannot provide them: remove it", key
            )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _refuse("messages must be a non-empty list of {role, content} messages", "messages")
    chat: ChatRequest = {"model": body.get("model"), "messages": []}
    if body.get("system"):
        chat["messages"].append({"role": "system", "content": _text_of(body["system"], "system")})
    for i, msg in enumerate(messages):
        chat["messages"].extend(_message(msg, f"messages[{i}]", i == len(messages) - 1))
    _settings(body, chat)
    if body.get("stream"):
        chat["stream"], chat["stream_options"] = True, {"include_usage": True}
    if body.get("tools") is not None:
        if not isinstance(body["tools"], list):
            raise _refuse("tools must be a list of tool definitions", "tools")
        if body["tools"]:
            chat["tools"] = [_tool(tool, i) for i, tool in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
        if body["tool_choice"].get("disable_parallel_tool_use"):
            chat["parallel_tool_calls"] = False
    if (response_format := _output_format(body.get("output_config"))) is not None:
        chat["response_format"] = response_format
    return chat


def to_chat(body: Mapping[str, Any]) -> ChatRequest:
    """An Anthropic Messages request (the client's JSON body) → a chat-completions request
    (see the module doc); ``max_tokens`` is required, an integer of at least 1."""
    if body.get("max_tokens") is None:
        raise _refuse(
            "max_tokens is required: the most tokens to generate, an integer of at least 1",
            "max_tokens",
        )
    if (limit := integer(body["max_tokens"])) is None or limit < 1:
        raise _refuse(
            f"max_tokens must be an integer of at least 1, not {body['max_tokens']!r}"
            " (lemoncore does not pre-warm the prompt cache with 0)",
            "max_tokens",
        )
    chat = _translate(body)
    chat["max_tokens"] = limit
    return chat


def count_tokens_request(body: Mapping[str, Any]) -> ChatRequest:
    """A ``count_tokens`` body (no ``max_tokens``) → a chat request generating one token,
    whose ``usage.prompt_tokens`` is the count: the whole prompt, cached or not."""
    chat = _translate({**body, "stream": False})
    chat["max_tokens"] = 1
    return chat
