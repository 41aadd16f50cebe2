"""What every stand-in engine repeats, in the standard library only: OpenAI's answer shapes
as typed records and the functions that build them (a completion, a stream's chunks,
usage, an error, the model list), a request handler that logs nothing, reads JSON and
writes JSON or server-sent events, a wait on a file a test creates, and the loop that
serves a handler. The placeholder engine (:mod:`lemoncore.echo_engine`, which generated
plugins run) is built on it, so it ships; the test suites' stand-in engines
(``tests/tinyserver.py``, ``tests/hostile_engine.py``, the VTE plugin's
``vte_server_standin.py``) use it too, each keeping only what makes it different.
"""

from __future__ import annotations

import json
import os
import signal
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase
from typing import NoReturn, NotRequired, TypedDict

CHAT = "chat.completion"
CHUNK = "chat.completion.chunk"
TEXT = "text_completion"  # a completion's ``object``, whole or streamed


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Message(TypedDict):
    role: str
    content: str


class Delta(TypedDict, total=False):
    """What a chat stream's chunk adds to the message (``{}`` with the finish)."""

    role: str
    content: str


class Choice(TypedDict):
    """One choice: a chat answer's ``message``, a chat chunk's ``delta``, or a
    completion's ``text`` (whole or a piece)."""

    index: int
    finish_reason: str | None
    message: NotRequired[Message]
    delta: NotRequired[Delta]
    text: NotRequired[str]
    logprobs: NotRequired[None]


class Head(TypedDict):
    """What every answer and chunk of one request starts with."""

    id: str
    created: int
    model: str


class Answer(Head):
    """A whole answer (``object``: :data:`CHAT` or :data:`TEXT`) or one stream event
    (:data:`CHUNK`, or :data:`TEXT` for a streamed completion)."""

    object: str
    choices: list[Choice]
    usage: NotRequired[Usage]


class ErrorDetail(TypedDict):
    message: str
    type: str
    code: NotRequired[None]
    param: NotRequired[None]


class ErrorBody(TypedDict):
    error: ErrorDetail


class ModelEntry(TypedDict):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(TypedDict):
    object: str
    data: list[ModelEntry]


def head(ident: str, model: str, created: int | None = None) -> Head:
    """``created`` defaults to now."""
    return {
        "id": ident,
        "created": int(time.time()) if created is None else created,
        "model": model,
    }


def usage(prompt: int, completion: int) -> Usage:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def message(content: str, finish: str | None = "stop") -> Choice:
    return {
        "index": 0,
        "finish_reason": finish,
        "message": {"role": "assistant", "content": content},
    }


def delta(content: Delta, finish: str | None = None) -> Choice:
    return {"index": 0, "finish_reason": finish, "delta": content}


def text(content: str, finish: str | None = None) -> Choice:
    return {"index": 0, "finish_reason": finish, "text": content}


def answer(
    start: Head, choices: list[Choice], kind: str = CHAT, counts: Usage | None = None
) -> Answer:
    """An answer or chunk of ``kind`` (``object``); ``counts`` becomes its ``usage``."""
    made: Answer = {
        "id": start["id"],
        "created": start["created"],
        "model": start["model"],
        "object": kind,
        "choices": choices,
    }
    if counts is not None:
        made["usage"] = counts
    return made


def error(
    message: str, kind: str = "invalid_request_error", *, code_and_param: bool = False
) -> ErrorBody:
    """OpenAI's error body; ``code_and_param`` adds both, as ``null``."""
    detail: ErrorDetail = {"message": message, "type": kind}
    if code_and_param:
        detail["code"] = detail["param"] = None
    return {"error": detail}


def models(name: str, owned_by: str, created: int = 0) -> ModelList:
    """``GET /v1/models``: the one model served."""
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": created, "owned_by": owned_by}],
    }


def wait_for_file(path: str | None, within: float = 60) -> None:
    """Return once ``path`` exists, polling every 10 ms, or after ``within`` seconds (a
    test that never creates it still ends); at once when ``path`` is empty or ``None``."""
    deadline = time.monotonic() + within
    while path and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


class Events:
    """Server-sent events on a response whose head is sent: ``data: <JSON>`` frames
    (HTTP/1.1 chunks when ``chunked``), each written at once."""

    def __init__(self, out: BufferedIOBase, chunked: bool) -> None:
        self.out, self.chunked = out, chunked

    def send(self, event: object) -> None:
        """One event: a string as it is (``[DONE]``), anything else as JSON."""
        data = f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()
        self.out.write(b"%x\r\n%s\r\n" % (len(data), data) if self.chunked else data)
        self.out.flush()

    def done(self) -> None:
        """``data: [DONE]``, then the last chunk when chunked."""
        self.send("[DONE]")
        if self.chunked:
            self.out.write(b"0\r\n\r\n")


class Handler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and speaks JSON and server-sent events."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def read_json(self) -> object:
        """The body as JSON; ``ValueError`` when it is not."""
        return json.loads(self.read_body())

    def send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status: int, body: object) -> None:
        self.send_bytes(status, json.dumps(body).encode(), "application/json")

    def open_events(self, *headers: tuple[str, str], chunked: bool = False) -> Events:
        """Send a 200 ``text/event-stream`` head (``headers`` after its type, then
        ``Transfer-Encoding: chunked`` when ``chunked``); the events go on it."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        for name, value in headers:
            self.send_header(name, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        return Events(self.wfile, chunked)


def _exit(signum: int, frame: object) -> NoReturn:
    raise SystemExit(0)


def serve(
    handler: type[BaseHTTPRequestHandler],
    port: int,
    host: str = "127.0.0.1",
    *,
    exit_on_sigterm: bool = True,
    ready: str = "",
) -> None:
    """Serve ``handler`` on ``host:port``, a daemon thread per connection (the process
    does not wait for requests in flight), until the process ends; print ``ready`` (when
    given) once listening. ``exit_on_sigterm``: SIGTERM raises ``SystemExit(0)`` here
    (else it kills, its default)."""
    server = ThreadingHTTPServer((host, port), handler)
    if exit_on_sigterm:
        signal.signal(signal.SIGTERM, _exit)
    if ready:
        print(ready, flush=True)
    server.serve_forever()
