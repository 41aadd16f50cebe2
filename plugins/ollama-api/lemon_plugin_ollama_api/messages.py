"""Chat messages and tool calls between Ollama's shapes and OpenAI's.

Ollama's tool calls carry ``function.arguments`` as an object and may have no id; its tool
results name the function (``tool_name``). OpenAI's carry arguments as a JSON string and
link a result to its call by ``tool_call_id``: calls without an id get ``call_<m>_<c>``
(message and call index) and a result without one answers the oldest unanswered call
of its function.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

from lemoncore.plugin import LemonError

from lemon_plugin_ollama_api.bodies import BadRequest, Message

_IMAGE_TYPES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_url(data: str) -> dict[str, Any]:
    """A base64 image as an OpenAI ``image_url`` content part (a data URL)."""
    try:
        head = base64.b64decode(data, validate=True)[:12]
    except (binascii.Error, ValueError):
        raise BadRequest("images must be base64-encoded image files") from None
    mime = next((m for magic, m in _IMAGE_TYPES if head.startswith(magic)), None)
    if mime is None and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        mime = "image/webp"
    if mime is None:
        raise BadRequest("images must be PNG, JPEG, GIF or WebP files")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def user_content(text: str, images: Sequence[str]) -> str | list[dict[str, Any]]:
    """Message content: the text alone, or text and image parts."""
    if not images:
        return text
    return [{"type": "text", "text": text}, *(image_url(i) for i in images)]


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Ollama chat messages as OpenAI chat messages (see the module's note on ids)."""
    out: list[dict[str, Any]] = []
    unanswered: list[tuple[str, str]] = []  # (function name, call id), oldest first
    for m_index, message in enumerate(messages):
        item: dict[str, Any] = {
            "role": message.role,
            "content": user_content(message.content, message.images),
        }
        if message.tool_calls:
            calls = []
            for c_index, call in enumerate(message.tool_calls):
                call_id = call.id or f"call_{m_index}_{c_index}"
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": json.dumps(call.function.arguments),
                        },
                    }
                )
                unanswered.append((call.function.name, call_id))
            item["tool_calls"] = calls
        if message.role == "tool":
            item["tool_call_id"] = _answered(message, unanswered, m_index)
        out.append(item)
    return out


def _answered(message: Message, unanswered: list[tuple[str, str]], index: int) -> str:
    """The id of the call a tool result answers (removed from ``unanswered``)."""
    for i, (name, call_id) in enumerate(unanswered):
        if call_id == message.tool_call_id or (
            not message.tool_call_id and (name == message.tool_name or not message.tool_name)
        ):
            del unanswered[i]
            return call_id
    return message.tool_call_id or f"call_{index}_result"


def ollama_tool_calls(calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tool calls (arguments as JSON text) as Ollama's (arguments as an object);
    arguments that are not a JSON object are a 502 naming the call."""
    out = []
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        name, text = function.get("name", ""), function.get("arguments") or "{}"
        try:
            arguments = json.loads(text) if isinstance(text, str) else text
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            raise LemonError(
                f"the model called {name!r} with arguments that are not a JSON object: {text!r}",
                502,
                "backend_error",
                "bad_tool_call",
            )
        entry: dict[str, Any] = {"function": {"index": index, "name": name, "arguments": arguments}}
        if call.get("id"):
            entry["id"] = call["id"]
        out.append(entry)
    return out
