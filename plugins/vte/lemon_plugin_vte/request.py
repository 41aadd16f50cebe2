"""Requests reshaped for vte-server, which reads fewer of OpenAI's fields than clients send
(VTE tag ``0.3.7``, ``vte/server/http_server.py``)."""

from __future__ import annotations

from typing import Any

from lemoncore.plugin import RequestRefused


def normalize(endpoint: str, body: dict[str, Any]) -> None:
    """Make ``body`` one vte-server reads as meant, in place (idempotent), or refuse it.

    ``repeat_penalty`` becomes ``repetition_penalty``, the name VTE reads first
    (``chat_completions``). A streamed ``/v1/completions`` is refused: VTE ignores
    ``stream`` there (``completions``). Array-form ``content`` (what the openai SDK sends
    for multi-part messages) becomes its text parts joined by newlines, as lemoncore's
    Responses translation joins them: VTE's Qwen2.5 template would put the list's Python
    ``repr`` into the prompt (``compiler/tokenizer.py`` ``QwenTokenizer.apply_chat_template``).
    Any other part (an image, audio) is refused: VTE reads text only."""
    if "repeat_penalty" in body and "repetition_penalty" not in body:
        body["repetition_penalty"] = body.pop("repeat_penalty")
    if endpoint == "/v1/completions" and body.get("stream"):
        raise RequestRefused(
            "vte-server does not stream /v1/completions; send the request "
            "with stream false, or use /v1/chat/completions"
        )
    messages = body.get("messages") if endpoint == "/v1/chat/completions" else None
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            message["content"] = _text(message["content"], str(body.get("model")), index)


def _text(parts: list[Any], model: str, index: int) -> str:
    """The text of ``messages[index]``'s ``parts``; ``RequestRefused`` naming ``model``
    for a part that is not text."""
    texts = []
    for number, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            raise RequestRefused(
                f"model {model!r} runs on VTE, which reads text only, and "
                f"messages[{index}].content[{number}] is a {kind!r} part: send text parts "
                "only, or use a model whose engine reads images (labelled 'vision'; "
                "'lemon show MODEL' lists a model's labels)"
            )
        texts.append(str(part.get("text", "")))
    return "\n".join(texts)
