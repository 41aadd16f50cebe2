"""OpenAI answer chunks as Ollama's ``/api/chat`` and ``/api/generate`` lines.

:class:`Turn` gathers what the chunks of one answer carry (text, reasoning, tool calls
whose arguments arrive in pieces, the finish reason, usage); :class:`Clock` measures
Ollama's durations here, in nanoseconds; the ``*_line`` functions build the JSON lines.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from lemon_plugin_ollama_api.messages import ollama_tool_calls

Kind = Literal["chat", "generate"]


def now() -> str:
    """The current time as Ollama writes ``created_at``: RFC 3339 in UTC."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Clock:
    """When each phase of one request ended, from ``time.monotonic_ns``."""

    start: int = field(default_factory=time.monotonic_ns)
    load_ns: int = 0  # a load this request waited for
    sent: int | None = None  # the request went to the engine
    first: int | None = None  # the first generated token arrived
    end: int | None = None

    def mark_sent(self) -> None:
        self.sent = time.monotonic_ns()

    def mark_token(self) -> None:
        if self.first is None:
            self.first = time.monotonic_ns()

    def mark_end(self) -> None:
        self.end = time.monotonic_ns()

    def durations(self) -> dict[str, int]:
        """``total``: the whole request; ``load``: the load it waited for;
        ``prompt_eval``: until the first token; ``eval``: from it to the end."""
        end = self.end if self.end is not None else time.monotonic_ns()
        sent = self.sent if self.sent is not None else end
        first = self.first if self.first is not None else end
        return {
            "total_duration": end - self.start,
            "load_duration": self.load_ns,
            "prompt_eval_duration": first - sent,
            "eval_duration": end - first,
        }


@dataclass
class Turn:
    """One answer, gathered from its OpenAI chunks (chat or completions)."""

    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: str | None = None
    usage: Mapping[str, Any] | None = None
    pieces: int = 0  # chunks that carried generated output

    def feed(self, chunk: Mapping[str, Any]) -> tuple[str, str]:
        """Take one chunk; return the (text, reasoning) it adds."""
        self.usage = chunk.get("usage") or self.usage
        text = thinking = ""
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            text += delta.get("content") or choice.get("text") or ""
            thinking += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or ():
                self._add_call(call)
            self.finish = choice.get("finish_reason") or self.finish
            if delta.get("tool_calls") or text or thinking:
                self.pieces += 1
        self.text.append(text)
        self.thinking.append(thinking)
        return text, thinking

    def _add_call(self, call: Mapping[str, Any]) -> None:
        slot = self.calls.setdefault(
            call.get("index", len(self.calls)),
            {"id": "", "function": {"name": "", "arguments": ""}},
        )
        slot["id"] = call.get("id") or slot["id"]
        function = call.get("function") or {}
        slot["function"]["name"] += function.get("name") or ""
        arguments = function.get("arguments") or ""
        if isinstance(arguments, str):
            slot["function"]["arguments"] += arguments
        else:  # a whole object, as a non-streaming answer may carry
            slot["function"]["arguments"] = arguments

    def tool_calls(self) -> list[dict[str, Any]]:
        """The complete tool calls, Ollama-shaped (arguments as objects)."""
        return ollama_tool_calls([self.calls[i] for i in sorted(self.calls)])

    @property
    def done_reason(self) -> str:
        """Ollama's ``done_reason``: ``length`` when cut by ``num_predict``, else
        ``stop`` (a tool call is ``stop`` too, as Ollama reports it)."""
        return "length" if self.finish == "length" else "stop"

    def counts(self) -> dict[str, int]:
        usage = self.usage or {}
        return {
            "prompt_eval_count": int(usage.get("prompt_tokens") or 0),
            "eval_count": int(usage.get("completion_tokens") or self.pieces),
        }


def line(
    kind: Kind,
    model: str,
    text: str,
    thinking: str = "",
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One ``done: false`` line carrying ``text`` (and reasoning, tool calls)."""
    out: dict[str, Any] = {"model": model, "created_at": now()}
    if kind == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if thinking:
            message["thinking"] = thinking
        if tool_calls:
            message["tool_calls"] = tool_calls
        out["message"] = message
    else:
        out["response"] = text
        if thinking:
            out["thinking"] = thinking
    out["done"] = False
    return out


def final_line(kind: Kind, model: str, turn: Turn, clock: Clock, whole: bool) -> dict[str, Any]:
    """The ``done: true`` line: the whole answer when ``whole`` (``stream: false``), else
    empty text; the finish reason, token counts and durations."""
    text = "".join(turn.text) if whole else ""
    thinking = "".join(turn.thinking) if whole else ""
    calls = turn.tool_calls() if whole else None
    return {
        **line(kind, model, text, thinking, calls),
        "done": True,
        "done_reason": turn.done_reason,
        **turn.counts(),
        **clock.durations(),
    }


def status_line(kind: Kind, model: str, reason: Literal["load", "unload"]) -> dict[str, Any]:
    """The answer to a request that only loads or unloads its model."""
    return {**line(kind, model, ""), "done": True, "done_reason": reason}
