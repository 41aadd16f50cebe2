"""A placeholder engine: a small, real OpenAI-compatible HTTP server that is not a model.

``lemon plugins new NAME --engine python`` generates a plugin that runs it, so the new
project passes its tests and the conformance kit before its author has an engine; the
author replaces it with theirs (the launch's ``-m`` module). Run it as a Python-hosted
engine is run::

    python -m lemoncore.echo_engine --model FILE --alias SERVED_NAME --port N

It serves ``GET /health`` (200 once it listens), ``GET /v1/models``, and ``POST
/v1/chat/completions`` and ``/v1/completions``, streaming (SSE, ``stream_options.
include_usage``) and not. Its "model" is a text file (``--model``, which must exist, as a
real engine's weights must): every answer is that file's words in order, ending after
the last (``finish_reason: stop``), at ``max_tokens`` (``length``) or before a ``stop``
string (``stop``). A token is a word; usage counts the words of the prompt (plus one per chat
message) and of the answer. Sampling parameters are accepted and ignored: the output is
deterministic. Every answer's ``model`` is ``--alias``, the name lemoncore serves.
A prompt and ``max_tokens`` above ``--ctx-size`` words is refused with a 400.
With ``--reasoning-format deepseek`` (llama-server's flag), a chat answer that opens with
the words ``<think>`` ... ``</think>`` gives those in between as its reasoning, as
llama-server does: ``delta.reasoning_content`` in a stream, ``message.reasoning_content``
in a whole answer, the rest as ``content`` (llama.cpp ``common/chat.cpp``: the
``COMMON_REASONING_FORMAT_DEEPSEEK`` parse of ``<think>``, and
``common_chat_msg_diff_to_json_oaicompat`` for the stream's deltas; not yet re-read at
the pinned b11434 tag).

When the environment variable ``ECHO_ENGINE_API_KEY`` is set, ``/v1/*`` requires
``Authorization: Bearer <key>`` (lemoncore sends the launch's ``backend_key``). It exits
on SIGTERM. Standard library only (and :mod:`lemoncore.standin`, which is).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from lemoncore import standin
from lemoncore.standin import (
    CHAT,
    CHUNK,
    TEXT,
    Answer,
    Delta,
    Head,
    Message,
    Usage,
    answer,
    delta,
    error,
    head,
    message,
    models,
    serve,
    text,
    usage,
)

KEY_ENV = "ECHO_ENGINE_API_KEY"
DEFAULT_MAX_TOKENS = 16


class ReasoningDelta(Delta, total=False):
    reasoning_content: str


class ReasoningMessage(Message):
    reasoning_content: str


class BadRequest(Exception):
    """A request the engine refuses (400, OpenAI's error shape)."""


def _text(content: object) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class Engine:
    """What the server answers with: the model file's words, the served name, limits."""

    def __init__(
        self, words: Sequence[str], alias: str, ctx_size: int, reasoning: bool = False
    ) -> None:
        if not words:
            raise ValueError("the model file has no words to answer with")
        self.words, self.alias, self.ctx_size = tuple(words), alias, ctx_size
        self.reasoning = reasoning  # --reasoning-format deepseek

    def prompt_tokens(self, path: str, body: Mapping[str, object]) -> int:
        if path == "/v1/chat/completions":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("'messages' must be a non-empty list")
            return sum(
                1 + len(_text(m.get("content")).split()) for m in messages if isinstance(m, dict)
            )
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            prompt = " ".join(map(str, prompt))
        if not isinstance(prompt, str):
            raise BadRequest("'prompt' must be a string")
        return max(1, len(prompt.split()))

    def answer(self, body: Mapping[str, object], prompt_tokens: int) -> tuple[list[str], str]:
        """The answer's pieces (a word each, after the first with its leading space) and
        its finish reason: the model file's words up to ``max_tokens``, cut before the
        first ``stop`` string."""
        limit = next(
            (body[k] for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None),
            DEFAULT_MAX_TOKENS,
        )
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise BadRequest("'max_tokens' must be a positive integer")
        if prompt_tokens + limit > self.ctx_size:
            raise BadRequest(
                f"{prompt_tokens} prompt tokens and max_tokens {limit} exceed "
                f"the context size {self.ctx_size}"
            )
        words = " ".join(self.words[:limit])
        finish = "length" if len(self.words) > limit else "stop"
        stop = body.get("stop") or []
        stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, Iterable) else []
        found = [i for s in stops if isinstance(s, str) and s and (i := words.find(s)) >= 0]
        if found:
            words, finish = words[: min(found)], "stop"
        return re.findall(r"\s*\S+", words), finish


def split_reasoning(pieces: list[str]) -> tuple[list[str], list[str]]:
    """An answer's reasoning and content pieces: those between an opening ``<think>``
    and ``</think>`` (or the end), and those after; no reasoning when it opens otherwise."""
    if not pieces or pieces[0].strip() != "<think>":
        return [], pieces
    end = next((i for i, p in enumerate(pieces) if p.strip() == "</think>"), len(pieces))
    reasoning, content = pieces[1:end], pieces[end + 1 :]
    for part in (reasoning, content):
        if part:
            part[0] = part[0].lstrip()
    return reasoning, content


class Handler(standin.Handler):
    protocol_version = "HTTP/1.1"
    engine: Engine
    key: str = ""

    def _error(self, status: int, message: str, type_: str = "invalid_request_error") -> None:
        self.send_json(status, error(message, type_, code_and_param=True))

    def _authorized(self) -> bool:
        if self.key and self.headers.get("Authorization") != f"Bearer {self.key}":
            self._error(401, "missing or wrong API key", "authentication_error")
            return False
        return True

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_json(200, {"status": "ok"})
        elif self.path == "/v1/models" and self._authorized():
            self.send_json(200, models(self.engine.alias, "lemoncore-echo-engine"))
        elif self.path != "/v1/models":
            self._error(404, f"no route {self.path}", "not_found_error")

    def do_POST(self) -> None:
        if self.path not in {"/v1/chat/completions", "/v1/completions"}:
            self._error(404, f"no route {self.path}", "not_found_error")
            return
        if not self._authorized():
            return
        try:
            body = self.read_json()
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            prompt_tokens = self.engine.prompt_tokens(self.path, body)
            pieces, finish = self.engine.answer(body, prompt_tokens)
        except (BadRequest, ValueError) as exc:
            self._error(400, str(exc))
            return
        counts = usage(prompt_tokens, len(pieces))
        chat = self.path == "/v1/chat/completions"
        start = head(
            f"{'chatcmpl' if chat else 'cmpl'}-echo-{time.monotonic_ns()}", self.engine.alias
        )
        thought: list[str] = []
        if chat and self.engine.reasoning:
            thought, pieces = split_reasoning(pieces)
        if body.get("stream"):
            options = body.get("stream_options")
            include = isinstance(options, dict) and bool(options.get("include_usage"))
            events = self.open_events(("Cache-Control", "no-cache"), chunked=True)
            for piece in thought:
                events.send(answer(start, [delta(ReasoningDelta(reasoning_content=piece))], CHUNK))
            for event in _chunks(start, chat, pieces, finish, counts if include else None):
                events.send(event)
            events.done()
            return
        said = "".join(pieces)
        choice = message(said, finish) if chat else text(said, finish)
        if thought:
            choice["message"] = _reasoned(said, "".join(thought))
        if not chat:
            choice["logprobs"] = None
        self.send_json(200, answer(start, [choice], CHAT if chat else TEXT, counts))


def _reasoned(said: str, thought: str) -> ReasoningMessage:
    return {"role": "assistant", "content": said, "reasoning_content": thought}


def _chunks(
    start: Head, chat: bool, pieces: list[str], finish: str, counts: Usage | None
) -> Iterator[Answer]:
    """The SSE events of a streamed answer: a piece each, the finish, then usage."""
    kind = CHUNK if chat else TEXT
    for piece in pieces:
        yield answer(
            start, [delta({"role": "assistant", "content": piece}) if chat else text(piece)], kind
        )
    yield answer(start, [delta({}, finish) if chat else text("", finish)], kind)
    if counts is not None:
        yield answer(start, [], kind, counts)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Serve until SIGTERM (exit 0); exit 1 with a message when the model file is
    missing or empty."""
    parser = argparse.ArgumentParser(
        prog="python -m lemoncore.echo_engine",
        description=__doc__.split("\n\n")[0] if __doc__ else "",
    )
    parser.add_argument("--model", type=Path, required=True, help="a text file to answer with")
    parser.add_argument("--alias", required=True, help="the model name answers report")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ctx-size", type=int, default=4096)
    parser.add_argument(
        "--reasoning-format",
        choices=("none", "deepseek"),
        default="none",
        help="deepseek: an answer's opening <think>...</think> is its reasoning_content",
    )
    args = parser.parse_args(argv)
    try:
        words = args.model.read_text(encoding="utf-8").split()
        reasoning = args.reasoning_format == "deepseek"
        engine = Engine(words, args.alias, args.ctx_size, reasoning)
    except (OSError, ValueError) as exc:
        print(f"echo_engine: cannot load model {args.model}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    handler = type("Bound", (Handler,), {"engine": engine, "key": os.environ.get(KEY_ENV, "")})
    serve(
        handler,
        args.port,
        args.host,
        ready=f"echo_engine: serving {args.alias} on http://{args.host}:{args.port}",
    )
    raise SystemExit(0)


if __name__ == "__main__":
    main()
