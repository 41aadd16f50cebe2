"""Serving an API through one the engine speaks: Anthropic Messages and OpenAI Responses
through chat completions, for engines that serve only chat (VTE, container engines) and
for llama-server, whose own ``/v1/messages`` and ``/v1/responses`` do not match the APIs
(``lemon_plugin_llamacpp.recipe``). An engine that serves an endpoint itself
(``Backend.endpoints``) always gets the request as it came; a :class:`Translation` is
used only when it does not, and lemoncore then owns the wire format. The translators are pure:
a request body in, a chat body out (:mod:`.anthropic`, :mod:`.responses`); a chat answer,
or its stream's chunks, back (:mod:`.anthropic_reply`, :mod:`.responses_reply`, over the
shared :mod:`.walk`); the wire shapes are TypedDicts (:mod:`.wire` for chat,
:mod:`.client_wire` for what clients get).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from lemoncore.serving.sse import DONE, DataLines, error_message
from lemoncore.translation import anthropic, responses
from lemoncore.translation.walk import error_status
from lemoncore.translation.wire import ChatChunk, ChatCompletion, ChatRequest

CHAT = "/v1/chat/completions"


class StreamTranslator(Protocol):
    """Turns one chat stream into another API's events (SSE bytes); :meth:`fail` ends
    it with an error whose HTTP status would have been ``status``."""

    def feed(self, chunk: ChatChunk) -> bytes: ...
    def finish(self) -> bytes: ...
    def fail(self, message: str, status: int = ...) -> bytes: ...


@dataclass(frozen=True)
class Translation:
    """How to serve an endpoint through ``target``: the request (given the client's JSON
    body; the chat body as :func:`~lemoncore.serving.forwarding.exchange` takes it), the
    answer (given the engine's answer and the request as it came) and, for streams, a
    translator."""

    target: str
    request: Callable[[Mapping[str, Any]], dict[str, Any]]
    reply: Callable[[ChatCompletion, Mapping[str, Any]], Mapping[str, object]]
    stream: Callable[[Mapping[str, Any]], StreamTranslator] | None = None


def _sent(
    to_chat: Callable[[Mapping[str, Any]], ChatRequest],
) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """``to_chat`` answering a plain dict, the body type the forwarding layer takes."""
    return lambda body: dict(to_chat(body))


TRANSLATIONS: dict[str, Translation] = {
    "/v1/messages": Translation(
        CHAT,
        _sent(anthropic.to_chat),
        lambda chat, body: anthropic.from_chat(chat, body["model"]),
        lambda body: anthropic.MessagesStream(body["model"]),
    ),
    "/v1/messages/count_tokens": Translation(
        CHAT,
        _sent(anthropic.count_tokens_request),
        lambda chat, body: anthropic.count_tokens_reply(chat),
    ),
    "/v1/responses": Translation(
        CHAT, _sent(responses.to_chat), responses.from_chat, responses.ResponsesStream
    ),
}


class TranslatedFraming:
    """The relay's framing (:class:`lemoncore.serving.proxy.Framing`) for a translated
    stream: the engine's chat events in, the translator's events out."""

    def __init__(self, translator: StreamTranslator, max_event: int) -> None:
        """``max_event``: the longest engine event read (``max_answer_bytes``)."""
        self.translator, self.lines, self.ended = translator, DataLines(max_event), False
        self.error = False  # the engine's stream carried an error event

    def chunk(self, data: bytes) -> bytes:
        out = b""
        for event in self.lines.feed(data):
            if self.ended:
                break
            if event is DONE:
                out += self.end()
            elif (message := error_message(event)) is not None:
                self.error = True
                assert isinstance(event, dict)  # error_message reads only objects
                out += self.fail(f"backend error: {message}", error_status(event["error"]))
            elif isinstance(event, dict):  # a JSON object, read as a chunk (with get)
                out += self.translator.feed(cast("ChatChunk", event))
        return out

    def end(self) -> bytes:
        if self.ended:
            return b""
        self.ended = True
        return self.translator.finish()

    def fail(
        self,
        message: str,
        status: int = 502,
        type_: str = "backend_error",
        code: str = "backend_error",
    ) -> bytes:
        """The translator's error event, typed by ``status`` where its API types errors
        (Anthropic's); ``type_`` and ``code`` are OpenAI's and not used."""
        if self.ended:
            return b""
        self.ended = True
        return self.translator.fail(message, status)
