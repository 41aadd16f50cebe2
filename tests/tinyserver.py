"""A tiny OpenAI-shaped HTTP server standing in for engines whose hardware is missing.

It answers ``GET /health`` and ``POST /v1/chat/completions`` (``{"delay": s}`` in the body
makes it slow; ``--start-delay`` makes it slow to start). ``--alone`` models memory
pressure: it refuses to start, saying it is out of memory, while another tiny server runs
(each marks itself in ``--registry``).
``--model`` must exist, as a real engine's model file must.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

args_parser = argparse.ArgumentParser()
args_parser.add_argument("--port", type=int, required=True)
args_parser.add_argument("--name", required=True)
args_parser.add_argument("--model", required=True)
args_parser.add_argument("--ctx-size", type=int, required=True)
args_parser.add_argument("--registry", type=Path, required=True)
args_parser.add_argument("--alone", action="store_true")
args_parser.add_argument("--start-delay", type=float, default=0.0)
args_parser.add_argument("--answer", type=int, default=200, help="status of every POST")
args_parser.add_argument("--garbage-stream", action="store_true",
                         help="answer streams with malformed SSE and no [DONE]")
args = args_parser.parse_args()

if not Path(args.model).is_file():
    sys.exit(f"error: model file {args.model} does not exist")
args.registry.mkdir(parents=True, exist_ok=True)
if args.alone and any(args.registry.iterdir()):
    sys.exit("error: out of memory: another engine holds the device")
marker = args.registry / f"{os.getpid()}.running"
marker.write_text(args.name)
time.sleep(args.start_delay)


class Handler(BaseHTTPRequestHandler):
    def _json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._json(200, {"status": "ok"}) if self.path == "/health" else self._json(404, {})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(float(body.get("delay", 0)))
        if args.answer != 200:
            self._json(args.answer, {"error": {"message": "wedged", "type": "server_error"}})
            return
        if args.garbage_stream and body.get("stream"):
            payload = b"data: {not json\n\n\xff\xfe raw bytes\nevent: ???\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self._json(200, {
            "id": "tiny", "object": "chat.completion", "model": args.name, "created": 0,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"ok from {args.name}"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}})

    def log_message(self, format: str, *a: object) -> None:
        pass


def stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


signal.signal(signal.SIGTERM, stop)
try:
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
finally:
    marker.unlink(missing_ok=True)
