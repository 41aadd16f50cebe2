"""The engine: OpenAI's ``POST /v1/audio/speech`` served with Debian's ``espeak-ng``.

Run it as lemoncore runs a Python-hosted engine::

    python -m lemon_plugin_espeak.engine --model VOICE_FILE --alias NAME --port N \
        [--host H] [--espeak PATH] [--wpm 175] [--timeout 60]

``--model`` is the model: a voice file (JSON, :class:`VoiceFile`) naming the espeak-ng
voice and a variant for each OpenAI voice name. It serves ``GET /health`` (200 once it
listens: the voice file is read and espeak-ng's voices are listed first), ``GET
/v1/models`` (the one model, ``--alias``) and ``POST /v1/audio/speech``
(:class:`~lemon_plugin_espeak.request.SpeechRequest`), answered with the whole file:
``audio/wav``, or ``audio/pcm`` (the samples alone). Errors are OpenAI's shape: a
request espeak-ng cannot serve is a 400 naming the field (``param``), a failure of
espeak-ng a 500 with the last line it wrote to stderr.

When ``ESPEAK_ENGINE_API_KEY`` is set, ``/v1/*`` requires ``Authorization: Bearer
<key>`` (lemoncore sends the launch's ``backend_key``). It exits 0 on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NoReturn, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lemon_plugin_espeak.espeak import (
    MAX_WPM,
    MIN_WPM,
    SynthesisError,
    Voices,
    list_voices,
    read_wav,
    synthesize,
)
from lemon_plugin_espeak.request import SpeechRequest

KEY_ENV = "ESPEAK_ENGINE_API_KEY"
MAX_BODY = 2**20  # 4096 characters fit many times over


class VoiceFile(BaseModel):
    """The model: ``voice``, an espeak-ng voice (``en-us``), and ``variants``, the
    espeak-ng variant each OpenAI voice name speaks with (``{"alloy": "f3"}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    voice: str = Field(min_length=1)
    variants: dict[str, str] = Field(default_factory=dict)


class ErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(TypedDict):
    error: ErrorDetail


def error(message: str, kind: str, param: str | None = None) -> ErrorBody:
    """OpenAI's error body."""
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


class Refused(Exception):
    """A request the engine refuses: ``status``, the message, the field it names."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param = status, param


class Engine:
    """What a request becomes: the espeak-ng voice, the words per minute, the audio."""

    def __init__(
        self, program: Path, model: VoiceFile, voices: Voices, wpm: int, timeout: float
    ) -> None:
        self.program, self.model, self.voices = program, model, voices
        self.wpm, self.timeout = wpm, timeout

    def voice(self, request: SpeechRequest) -> str:
        name = request.voice if isinstance(request.voice, str) else request.voice.id
        if name in self.model.variants:
            return f"{self.model.voice}+{self.model.variants[name]}"
        if self.voices.accepts(name):
            return name
        named = ", ".join(sorted(self.model.variants))
        raise Refused(
            400,
            f"voice {name!r} is not available: use one of {named}, or an espeak-ng voice "
            "that `espeak-ng --voices` lists (e.g. en-us, or en-us+f3 with a variant)",
            "voice",
        )

    def speak(self, request: SpeechRequest) -> tuple[bytes, str]:
        """The answer's bytes and content type."""
        wpm = min(MAX_WPM, max(MIN_WPM, round(self.wpm * request.speed)))
        voice = self.voice(request)
        try:
            audio = read_wav(synthesize(self.program, voice, wpm, request.input, self.timeout))
        except SynthesisError as exc:
            raise Refused(500, str(exc)) from None
        if request.response_format == "pcm":
            return audio.frames, "audio/pcm"
        return audio.wav(), "audio/wav"


def parse(body: bytes) -> SpeechRequest:
    """The request, or :class:`Refused` naming the first field that is wrong."""
    try:
        return SpeechRequest.model_validate_json(body, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        if not field and first["type"] == "json_invalid":
            raise Refused(400, f"the body is not JSON: {first['msg']}") from None
        raise Refused(400, f"{field or 'body'}: {first['msg']}", field) from None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine: Engine
    alias: str = ""
    key: str = ""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status: int, body: object) -> None:
        self._send(status, json.dumps(body).encode(), "application/json")

    def _refuse(self, refused: Refused) -> None:
        kind = "invalid_request_error" if refused.status < 500 else "server_error"
        if refused.status == 401:
            kind = "authentication_error"
        self._json(refused.status, error(str(refused), kind, refused.param))

    def _authorize(self) -> None:
        if self.key and self.headers.get("Authorization") != f"Bearer {self.key}":
            raise Refused(401, "missing or wrong API key")

    def do_GET(self) -> None:
        try:
            if self.path == "/health":
                self._json(200, {"status": "ok"})
                return
            if self.path != "/v1/models":
                raise Refused(404, f"no route GET {self.path}")
            self._authorize()
            entry = {"id": self.alias, "object": "model", "created": 0, "owned_by": "espeak-ng"}
            self._json(200, {"object": "list", "data": [entry]})
        except Refused as refused:
            self._refuse(refused)

    def do_POST(self) -> None:
        try:
            if self.path != "/v1/audio/speech":
                raise Refused(404, f"no route POST {self.path}")
            self._authorize()
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self.close_connection = True
                raise Refused(413, f"the body is over {MAX_BODY} bytes")
            data, content_type = self.engine.speak(parse(self.rfile.read(length)))
            self._send(200, data, content_type)
        except Refused as refused:
            self._refuse(refused)


def _exit(signum: int, frame: object) -> NoReturn:
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Serve until SIGTERM (exit 0); exit 1 with a message when the voice file or
    espeak-ng cannot be used."""
    parser = argparse.ArgumentParser(prog="python -m lemon_plugin_espeak.engine")
    parser.add_argument("--model", type=Path, required=True, help="the voice file (JSON)")
    parser.add_argument("--alias", required=True, help="the model name /v1/models reports")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--espeak", default="espeak-ng", help="the espeak-ng program")
    parser.add_argument("--wpm", type=int, default=175, help="words per minute at speed 1.0")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per synthesis")
    args = parser.parse_args(argv)
    found = shutil.which(args.espeak)
    try:
        if found is None:
            raise ValueError(f"{args.espeak} not found: apt install espeak-ng")
        model = VoiceFile.model_validate_json(args.model.read_bytes())
        voices = list_voices(Path(found))
        if not voices.accepts(model.voice):
            raise ValueError(f"espeak-ng has no voice {model.voice!r} (espeak-ng --voices)")
        if bad := sorted(v for v in model.variants.values() if v not in voices.variants):
            raise ValueError(f"espeak-ng has no variant {', '.join(bad)} (--voices=variant)")
    except (OSError, ValueError, subprocess.SubprocessError) as exc:  # ValidationError too
        print(f"espeak engine: cannot load {args.model}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    engine = Engine(Path(found), model, voices, args.wpm, args.timeout)
    key = os.environ.get(KEY_ENV, "")
    handler = type("Bound", (Handler,), {"engine": engine, "alias": args.alias, "key": key})
    server = ThreadingHTTPServer((args.host, args.port), handler)
    signal.signal(signal.SIGTERM, _exit)
    print(f"espeak engine: serving {args.alias} on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()
    raise SystemExit(0)


if __name__ == "__main__":
    main()
