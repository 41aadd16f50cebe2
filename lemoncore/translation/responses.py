"""OpenAI's Responses API over a chat-completions backend: pure translators.

:func:`to_chat` turns a ``POST /v1/responses`` body into a chat-completions body;
:func:`~lemoncore.translation.responses_reply.from_chat` (a chat completion into a
``response`` object) and :class:`~lemoncore.translation.responses_reply.ResponsesStream`
(a chat-completions SSE stream, parsed chunk by chunk, into the Responses event stream)
live in :mod:`.responses_reply` and are importable from here. lemoncore keeps no state,
so what needs it (``previous_response_id``, ``conversation``, ``background``,
``item_reference``) is a 400, as are hosted tools, file inputs and other input items a
chat completion cannot express. ``reasoning`` items in the input and the backend's
``reasoning_content`` are dropped; ``store``, ``include``, ``metadata``, ``reasoning``
and ``truncation`` are ignored (the answer echoes what the client sent).

``text.format`` becomes chat's ``response_format`` (:func:`_format`), which llama-server
turns into a grammar (``server-common.cpp``, ``oaicompat_chat_params_parse``: a
``json_schema``'s ``schema``, any object for ``json_object``), so the answer is the JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lemoncore.translation.checks import name_of, number_within, positive_integer
from lemoncore.translation.checks import refuse as _refuse
from lemoncore.translation.responses_reply import ResponsesStream, from_chat
from lemoncore.translation.wire import (
    ChatMessage,
    ChatRequest,
    ChatRole,
    ContentPart,
    FunctionDefinition,
    ImageURL,
    JSONObjectFormat,
    JSONSchema,
    JSONSchemaFormat,
    Tool,
    ToolCall,
    ToolChoice,
)

__all__ = ["ResponsesStream", "from_chat", "to_chat"]

_STATELESS = (
    "lemoncore keeps no conversation state: send the whole conversation in "
    "'input' (earlier output items included) instead"
)
_ROLES: dict[str, ChatRole] = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}
_TOOL_CHOICES: dict[str, ToolChoice] = {"auto": "auto", "none": "none", "required": "required"}


def _parts(content: Any, param: str) -> str | list[ContentPart]:
    """Responses content → chat content: a string when it is all text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _refuse(f"{param} must be a string or a list of content parts", param)
    parts: list[ContentPart] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text"):
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image" and part.get("image_url"):
            image: ImageURL = {"url": part["image_url"]}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise _refuse(
                f"{param}[{i}] ({kind!r}) cannot be translated to a chat "
                "completion: send input_text, or input_image with an image_url "
                "(a URL or a data: URI)",
                f"{param}[{i}]",
            )
    texts = [p["text"] for p in parts if p["type"] == "text"]
    return "\n".join(texts) if len(texts) == len(parts) else parts


def _input(items: Any) -> list[ChatMessage]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise _refuse("input must be a string or a list of items", "input")
    out: list[ChatMessage] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message" and not (isinstance(item.get("role"), str) and item["role"] in _ROLES):
            raise _refuse(
                f"{where}.role {item.get('role')!r} is unknown: use user, "
                "assistant, system or developer",
                f"{where}.role",
            )
        if kind == "message":
            content = _parts(item.get("content", ""), f"{where}.content")
            role = _ROLES[item["role"]]
            if role != "user" and not isinstance(content, str):
                raise _refuse(f"{where}: images are only accepted in user messages", where)
            out.append({"role": role, "content": content})
        elif kind == "function_call":
            call: ToolCall = {
                "id": name_of(item.get("call_id"), f"{where}.call_id"),
                "type": "function",
                "function": {
                    "name": name_of(item.get("name"), f"{where}.name"),
                    "arguments": item.get("arguments", "{}"),
                },
            }
            if out and out[-1]["role"] == "assistant":  # text and calls of one turn: one
                out[-1].setdefault("tool_calls", []).append(call)  # message
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output", "")
            text = output if isinstance(output, str) else _parts(output, f"{where}.output")
            if not isinstance(text, str):
                raise _refuse(f"{where}.output: a tool output can only be text here", where)
            call_id = name_of(item.get("call_id"), f"{where}.call_id")
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind == "reasoning":
            continue
        elif kind == "item_reference":
            raise _refuse(f"{where} is an item_reference; {_STATELESS}", where)
        else:
            raise _refuse(
                f"{where} ({kind!r}) cannot be translated to a chat completion: "
                "send messages, function_call and function_call_output items",
                f"{where}.type",
            )
    return out


def _tool(tool: Any, i: int) -> Tool:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise _refuse(
            f"tools[{i}] is a {kind!r} tool, which a local model cannot run: "
            "declare function tools",
            f"tools[{i}].type",
        )
    function: FunctionDefinition = {
        "name": name_of(tool.get("name"), f"tools[{i}].name"),
        "parameters": tool.get("parameters") or {},
    }
    for key in ("description", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> ToolChoice:
    if isinstance(choice, str) and choice in _TOOL_CHOICES:
        return _TOOL_CHOICES[choice]
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "function":
        return {
            "type": "function",
            "function": {"name": name_of(choice.get("name"), "tool_choice.name")},
        }
    raise _refuse(
        f"tool_choice {choice!r} cannot be translated: use auto, none, required "
        "or {'type': 'function', 'name': ...}",
        "tool_choice",
    )


def _format(fmt: Mapping[str, Any]) -> JSONSchemaFormat | JSONObjectFormat | None:
    if fmt.get("type") == "json_schema":
        schema: JSONSchema = {"name": fmt.get("name", "response"), "schema": fmt.get("schema", {})}
        for key in ("strict", "description"):
            if fmt.get(key) is not None:
                schema[key] = fmt[key]
        return {"type": "json_schema", "json_schema": schema}
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type", "text") == "text":
        return None
    raise _refuse(
        f"text.format type {fmt.get('type')!r} is unknown: use text, json_schema or json_object",
        "text.format.type",
    )


def to_chat(body: Mapping[str, Any]) -> ChatRequest:
    """A Responses request (the client's JSON body) → a chat-completions request (see the
    module doc)."""
    for key in ("previous_response_id", "conversation", "background"):
        if body.get(key):
            raise _refuse(f"{key} is not supported: {_STATELESS}", key)
    chat: ChatRequest = {"model": body.get("model"), "messages": []}
    if body.get("instructions"):
        chat["messages"].append({"role": "system", "content": str(body["instructions"])})
    chat["messages"].extend(_input(body.get("input", "")))
    if (limit := positive_integer(body, "max_output_tokens")) is not None:
        chat["max_tokens"] = limit
    if (temperature := number_within(body, "temperature", 0, 2)) is not None:
        chat["temperature"] = temperature
    if (top_p := number_within(body, "top_p", 0, 1)) is not None:
        chat["top_p"] = top_p
    if body.get("parallel_tool_calls") is not None:
        if not isinstance(body["parallel_tool_calls"], bool):
            raise _refuse("parallel_tool_calls must be true or false", "parallel_tool_calls")
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if body.get("stream"):
        chat["stream"], chat["stream_options"] = True, {"include_usage": True}
    if body.get("tools") is not None and not isinstance(body["tools"], list):
        raise _refuse("tools must be a list of function tools", "tools")
    if body.get("tools"):
        chat["tools"] = [_tool(tool, i) for i, tool in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    text = body.get("text") or {}
    if not isinstance(text, dict) or not isinstance(text.get("format", {}), dict):
        raise _refuse(
            "text must be an object, its format one too: {'format': {'type': "
            "'json_schema', 'name': ..., 'schema': {...}}}",
            "text",
        )
    if text.get("format") and (response_format := _format(text["format"])) is not None:
        chat["response_format"] = response_format
    return chat
