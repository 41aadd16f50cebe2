"""A stand-in ``vte-server`` written from VTE's documented contract (0.3.7), for machines
without Windows or an RDNA3 GPU. Standard library only.

Contract kept: the flags; fail fast with exit 1 on a bad GGUF path; listen only once the
"model" is loaded (connection refused until then); ``GET /health`` and ``/v1/models``;
chat completions streaming and not; completions non-streaming only (``stream`` ignored);
one generation at a time (a concurrent request gets 429 ``server_busy``); ``finish_reason``
"length" at max_tokens, else "stop"; usage on non-streaming answers; on streams a final
chunk with timing-only usage, and full usage in an extra chunk only with
``stream_options.include_usage``; ``--parent-pid`` watched; ``repetition_penalty`` read
(falling back to ``repeat_penalty``).

It is not a model: the reply repeats the last user message word by word, one word per
"token", 20 ms each. ``VTE_STANDIN_REPORT`` names a file that receives the argv, the
environment variables VTE reads, and every request body, as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

parser = argparse.ArgumentParser(prog="vte-server")
parser.add_argument("--gguf-path", required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--context-length", type=int, default=2048)
parser.add_argument("--idle-timeout", type=float, default=60)
parser.add_argument("--vram-limit-pct", type=float, default=80.0)
parser.add_argument("--parent-pid", type=int)
args = parser.parse_args()

REPORT = os.environ.get("VTE_STANDIN_REPORT")
ENV_KEYS = ("PATH", "HIP_PATH", "VTE_TARGET_ARCH_FAMILY", "VTE_DEVICE_INDEX",
            "PYTHONNOUSERSITE")


def report(kind: str, data: object) -> None:
    if REPORT:
        with open(REPORT, "a") as out:
            out.write(json.dumps({"kind": kind, "data": data}) + "\n")


model = Path(args.gguf_path)
try:
    with model.open("rb") as f:
        magic = f.read(4)
except OSError as exc:
    print(f"[vte] erro: GGUF nao encontrado: {exc}", flush=True)
    sys.exit(1)
if magic != b"GGUF":
    print(f"[vte] erro: {model} nao e um arquivo GGUF", flush=True)
    sys.exit(1)
report("start", {"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in ENV_KEYS}})
time.sleep(0.3)  # "loading": the port opens only afterwards

busy = threading.Lock()
CREATED = int(time.time())


def words_of(messages: list[dict[str, str]]) -> tuple[int, list[str]]:
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages) + 8
    last = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    return prompt_tokens, str(last.get("content", "")).split() or ["..."]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send_json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_json(200, {"status": "ready"})
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [
                {"id": model.stem, "object": "model", "created": CREATED, "owned_by": "vte"}]})
        else:
            self.send_json(404, {"error": {"message": "nao encontrado", "type": "not_found"}})

    def do_POST(self) -> None:
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except ValueError:
            self.send_json(400, {"error": {"message": "JSON invalido",
                                           "type": "invalid_request_error"}})
            return
        chat = self.path == "/v1/chat/completions"
        field = "messages" if chat else "prompt"
        if self.path not in {"/v1/chat/completions", "/v1/completions"} or field not in body:
            self.send_json(400, {"error": {"message": f"campo {field} ausente",
                                           "type": "invalid_request_error"}})
            return
        if not busy.acquire(blocking=False):
            self.send_json(429, {"error": {"message": "Servidor ocupado", "type": "server_busy"}})
            return
        try:
            report("request", {"path": self.path, "body": body})
            messages = body["messages"] if chat else [{"role": "user", "content": body["prompt"]}]
            self.generate(body, chat, *words_of(messages))
        finally:
            busy.release()

    def generate(self, body: dict[str, object], chat: bool, prompt_tokens: int,
                 words: list[str]) -> None:
        limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 512)
        out = words[:limit]
        finish = "length" if len(words) > limit else "stop"
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(out),
                 "total_tokens": prompt_tokens + len(out), "prefill_duration_ttft": 0.01,
                 "decoding_speed_tps": 50.0}
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        if not (chat and body.get("stream")):  # completions never stream
            time.sleep(0.02 * len(out))
            choice = ({"index": 0, "finish_reason": finish,
                       "message": {"role": "assistant", "content": " ".join(out)}} if chat
                      else {"index": 0, "finish_reason": finish, "text": " ".join(out)})
            self.send_json(200, {"id": ident, "created": int(time.time()), "model": "vte",
                                 "object": "chat.completion" if chat else "text_completion",
                                 "choices": [choice], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(delta: dict[str, str], finish_reason: str | None = None,
                  extra: dict[str, object] | None = None) -> None:
            payload = {"id": ident, "object": "chat.completion.chunk", "model": "vte",
                       "created": int(time.time()),
                       "choices": [{"index": 0, "delta": delta,
                                    "finish_reason": finish_reason}], **(extra or {})}
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        for i, word in enumerate(out):
            time.sleep(0.02)
            chunk({"content": word if i == 0 else " " + word})
        chunk({}, finish, {"usage": {"prefill_duration_ttft": 0.01, "decoding_speed_tps": 50.0}})
        options = body.get("stream_options") or {}
        if isinstance(options, dict) and options.get("include_usage"):
            payload = {"id": ident, "object": "chat.completion.chunk", "model": "vte",
                       "created": int(time.time()), "choices": [], "usage": usage}
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, format: str, *a: object) -> None:
        pass


def watch_parent(pid: int) -> None:
    while True:
        time.sleep(0.5)
        try:
            os.kill(pid, 0)
        except OSError:
            print("[vte] processo pai encerrado; saindo", flush=True)
            os._exit(0)


if args.parent_pid:
    threading.Thread(target=watch_parent, args=(args.parent_pid,), daemon=True).start()
server = ThreadingHTTPServer((args.host, args.port), Handler)
server.daemon_threads = True
print(f"[vte] pronto em http://{args.host}:{args.port}", flush=True)
server.serve_forever()
