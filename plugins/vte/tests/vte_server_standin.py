"""A stand-in ``vte-server`` that behaves as VTE 0.3.7's source does, for machines without
Windows or an RDNA3 GPU. Standard library and ``lemoncore.standin`` only; its hardware side
(the HIP DLL search, device selection, the kernel cache it writes into its working
directory) is ``vte_standin_hip.py`` beside it, with what stands in for Windows and the
GPU. Each behaviour cites the file and function of VTE's source (tag ``0.3.7``, commit
``274fdb0``); ``../../shared/reference/vte.md``, "VTE 0.3.7 as its source behaves", has
the line numbers.

Like VTE's release it writes its log in Windows' ANSI code page, ``VTE_STANDIN_ENCODING``
(default cp1252; unencodable letters become "?"): a PyInstaller bundle ignores
PYTHONIOENCODING and PYTHONUTF8 (``lemon_plugin_vte/launch.py`` cites why).

It is not a model: the reply repeats the last user message word by word, one word per
"token", ``VTE_STANDIN_TOKEN_S`` (default 0.02) seconds each, after a prefill of
``VTE_STANDIN_PREFILL_S`` (default 0) seconds. ``VTE_STANDIN_HOLD`` names a file: each
generation's prefill then lasts until that file exists, so a test, not a timer, decides
when it ends (a stand-in for a prefill of unknown length). ``VTE_STANDIN_REPORT`` names a
file that receives the argv, the environment VTE reads, the device chosen, the kernels
reused and written, and every request body, as JSON lines. Two more files are events a
test causes: ``VTE_STANDIN_PRESSURE`` (when it exists as a generation starts, VRAMPressure
Guard has unloaded the model: ``vram_pressure_guard.py`` ``_handle_pressure``'s CRITICAL
line, then ``model.py`` ``ensure_loaded`` reloads it inside that request; the file is
removed) and ``VTE_STANDIN_PANIC`` (when it exists, this process is in PANIC MODE, as after
a sync over the KernelWatchdog's limit, ``hip_runtime.py`` ``launch_kernel``: every
generation fails with its 500 until the process ends; the file is removed).

Not modelled, and why:

- VTE's idle unload (``core/lifecycle.py``): lemoncore always passes ``--idle-timeout 0``,
  which never starts VTE's idle monitor (``http_server.py`` ``cli_main``); the tests assert
  the flag. Given another value, the stand-in never unloads.
- What sets off the pressure guard and the watchdog (another process's VRAM use, a hung
  kernel): there is no GPU; the two files above are the events themselves.
- Generation (tokenizer, sampling, ``finish_reason`` beyond word counting, the context
  limit's ``HIPSafetyError``): no model runs.
- The parent watchdog polls every 0.5 s, not VTE's 5 s, to keep tests short.
- SIGBREAK (Windows only) and uvicorn's own signal handling: SIGINT ends it as VTE's
  handler does; SIGTERM kills it, as it kills VTE.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import vte_standin_hip as hip

from lemoncore.plugin import standin

BUSY = "O VTE já está gerando outra resposta; esta instância processa um pedido por vez."
PANIC = (
    "GPU em PANIC MODE (KernelWatchdog detectou timeout anterior). "
    "Novos lançamentos bloqueados até reinicialização do runtime."
)
TOKEN_S = float(os.environ.get("VTE_STANDIN_TOKEN_S", "0.02"))
PREFILL_S = float(os.environ.get("VTE_STANDIN_PREFILL_S", "0"))
REPORT = os.environ.get("VTE_STANDIN_REPORT")
HOLD = os.environ.get("VTE_STANDIN_HOLD")
TIMINGS = {"prefill_duration_ttft": 0.01, "decoding_speed_tps": 50.0}  # in VTE's usage
ENV_KEYS = ("PATH", "HIP_PATH", "VTE_TARGET_ARCH_FAMILY", "VTE_DEVICE_INDEX", "PYTHONNOUSERSITE")
server_log = logging.getLogger("VTE.Server")
model_log = logging.getLogger("VTE.Model")
# http_server.py: one generation per process (a non-blocking threading.Lock), and one
# event loop: a non-streaming generation runs on the loop and blocks every request,
# /health included; a stream runs in VTE-GenerationThread and leaves the loop free.
generation, event_loop = threading.Lock(), threading.Lock()
state: dict[str, Any] = {"model": Path(), "arch": "", "created": 0, "panic": False}
# http_server.py app: its four routes; Starlette answers any other path or method itself.
ROUTES = {"/health": "GET", "/v1/models": "GET", "/v1/chat/completions": "POST"}
ROUTES["/v1/completions"] = "POST"


def report(kind: str, data: object) -> None:
    if REPORT:
        with open(REPORT, "a") as out:
            out.write(json.dumps({"kind": kind, "data": data}) + "\n")


def event(variable: str) -> bool:
    """Whether the test has caused the event file ``variable`` names (then removed)."""
    path = os.environ.get(variable)
    if not path or not os.path.exists(path):
        return False
    os.remove(path)
    return True


def prefill() -> None:
    """The prefill: ``PREFILL_S``, and until the ``HOLD`` file exists (at most a minute, so a
    test that never releases it still ends); first a reload if the pressure guard unloaded
    the model, and PANIC MODE's failure (model.py generate, ensure_loaded)."""
    if event("VTE_STANDIN_PRESSURE"):
        logging.getLogger("vte.bridge.vram_pressure_guard").critical(
            "VRAM DA GPU CHEIA (97.0%% de uso REAL, considerando TODOS os processos usando a "
            "GPU -- não só o VTE). … Descarregando automaticamente o modelo menos usado no "
            "momento ('%s') para evitar instabilidade/falha de alocação.",
            state["model"],
        )
        model_log.info("Modelo descarregado da VRAM com sucesso")
        hip.initialize()  # the reload re-creates the runtime: device selection again
        hip.load_kernels(state["arch"])
    state["panic"] = state["panic"] or event("VTE_STANDIN_PANIC")
    if state["panic"]:
        raise RuntimeError(PANIC)
    standin.wait_for_file(HOLD)
    time.sleep(PREFILL_S)


def words_of(messages: object) -> tuple[int, list[str]]:
    """Prompt tokens and the words to repeat. ``messages`` may be a bare string (one user
    turn); a list ``content`` goes into the prompt as its Python repr, as VTE's Qwen2.5
    template puts it (tokenizer.py _coerce_chat_messages, QwenTokenizer.apply_chat_template)."""
    turns = [{"role": "user", "content": messages}] if isinstance(messages, str) else messages
    assert isinstance(turns, list)
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in turns) + 8
    last = next((m for m in reversed(turns) if m.get("role") == "user"), {})
    return prompt_tokens, str(last.get("content", "")).split() or ["..."]


class Handler(standin.Handler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        with event_loop:
            if self.routed("GET"):
                if self.path == "/health":
                    self.send_json(200, {"status": "ready"})
                else:
                    listed = standin.models(state["model"].stem, "vte", state["created"])
                    self.send_json(200, listed)

    def do_POST(self) -> None:
        event_loop.acquire()
        try:
            if self.routed("POST"):
                self.post()
        finally:
            if event_loop.locked():
                event_loop.release()

    def routed(self, method: str) -> bool:
        """Starlette's own answers beyond the routes, plain text (starlette routing.py
        Router.not_found, Route.handle): 404 ``Not Found``, 405 ``Method Not Allowed``."""
        want = ROUTES.get(self.path)
        if want == method:
            return True
        status, text = (404, b"Not Found") if want is None else (405, b"Method Not Allowed")
        self.send_bytes(status, text, "text/plain; charset=utf-8")
        return False

    def post(self) -> None:
        try:
            body = self.read_json()
        except ValueError:
            self.send_json(400, standin.error("Corpo da requisição não é um JSON válido."))
            return
        if not isinstance(body, dict):  # body.get raises: the global handler's 500
            self.send_json(500, standin.error("Erro interno do servidor.", "server_error"))
            return
        chat = self.path == "/v1/chat/completions"
        if chat and not body.get("messages"):  # _extract_prompt
            self.send_json(400, standin.error("Campo 'messages' ausente ou vazio na requisição."))
            return
        if not chat and not body.get("prompt"):  # completions: an empty prompt too
            self.send_json(400, standin.error("Campo 'prompt' ausente."))
            return
        if not generation.acquire(blocking=False):  # _BUSY_RESPONSE: no Retry-After
            report("busy", {"path": self.path})
            self.send_json(429, standin.error(BUSY, "server_busy"))
            return
        report("request", {"path": self.path, "body": body})
        prompt_tokens, words = words_of(body["messages"] if chat else body["prompt"])
        limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 512)
        out = words[:limit]
        finish = "length" if len(words) > limit else "stop"
        counts = {**standin.usage(prompt_tokens, len(out)), **TIMINGS}
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        if not (chat and body.get("stream")):  # completions never stream
            try:  # on the event loop: nothing else is served meanwhile; no disconnect check
                prefill()
                time.sleep(TOKEN_S * len(out))
            except RuntimeError as exc:  # HIPSafetyError: its own text, 500
                self.send_json(500, standin.error(str(exc), "server_error"))
                return
            finally:
                generation.release()
            said, start = " ".join(out), standin.head(ident, body.get("model", "vte"))
            choice = standin.message(said, finish) if chat else standin.text(said, finish)
            kind = standin.CHAT if chat else standin.TEXT
            self.send_json(200, standin.answer(start, [choice], kind, counts))
            return
        event_loop.release()  # the stream's generation thread leaves the loop free
        self.stream(body, ident, out, finish, counts)

    def stream(
        self, body: dict[str, Any], ident: str, out: list[str], finish: str, counts: dict[str, Any]
    ) -> None:
        """The stream; the generation thread works through the prefill and notices a
        disconnect only after its next visible piece, then releases the lock
        (``_run_generation``'s ``finally``). A generation error is an event after the 200,
        and no ``[DONE]``."""
        try:
            events = self.open_events(("Connection", "close"))
            try:
                prefill()
            except RuntimeError as exc:
                events.send(standin.error(str(exc), "server_error"))
                return

            def now() -> standin.Head:  # each chunk's own time
                return standin.head(ident, body.get("model", "vte"))

            for i, word in enumerate(out):  # the role rides on the first content chunk
                time.sleep(TOKEN_S)
                piece: standin.Delta = {"content": " " + word}
                if not i:
                    piece = {"role": "assistant", "content": word}
                events.send(standin.answer(now(), [standin.delta(piece)], standin.CHUNK))
            finished = standin.answer(now(), [standin.delta({}, finish)], standin.CHUNK)
            events.send({**finished, "usage": TIMINGS})
            options = body.get("stream_options") or {}
            if isinstance(options, dict) and options.get("include_usage"):
                events.send({**standin.answer(now(), [], standin.CHUNK), "usage": counts})
            events.done()
        except OSError:
            pass  # the client went away: stop_event, then the lock is released
        finally:
            generation.release()
            self.close_connection = True


def watch_parent(pid: int) -> None:
    """http_server.py _start_parent_watchdog: parent gone (os.kill(pid, 0) fails): exit 0."""
    while True:
        time.sleep(0.5)
        try:
            os.kill(pid, 0)
        except OSError:
            break
    server_log.warning(
        "Processo pai (PID %d) não existe mais -- encerrando e liberando VRAM (watchdog de órfão).",
        pid,
    )
    os._exit(0)


def stop(signum: int, frame: object) -> None:
    """http_server.py _install_signal_handlers: SIGINT unloads and exits 0."""
    server_log.info("Sinal %d recebido -- encerrando graciosamente.", signum)
    sys.exit(0)


def main() -> None:
    encoding = os.environ.get("VTE_STANDIN_ENCODING", "cp1252")
    for stream in (sys.stdout, sys.stderr):  # what a pipe gets from VTE's bundle
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(encoding=encoding, errors="replace")
    # bridge/logger.py get_logger: "<asctime> [<LEVEL>] <logger>: <msg>" on stdout.
    line = "%(asctime)s [%(levelname)s] %(name)s: %(message)s"
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format=line)
    parser = argparse.ArgumentParser(prog="vte-server")  # _parse_args: errors exit 2
    parser.add_argument("--gguf-path", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--context-length", type=int, default=None)
    parser.add_argument("--idle-timeout", type=int, default=60)
    parser.add_argument("--vram-limit-pct", type=float, default=80.0)
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args()
    report("start", {"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in ENV_KEYS}})
    signal.signal(signal.SIGINT, stop)
    if args.parent_pid:
        threading.Thread(target=watch_parent, args=(args.parent_pid,), daemon=True).start()
    # cli_main: the preflight probe (HIP init and selection) before the path check, then
    # the load (model.py from_path, sanitizer magic, HIP init again, kernels); any
    # failure logs one line and exits 1, and no port is ever bound.
    try:
        device = hip.initialize()
        report("device", device)
        state["model"] = model = Path(args.gguf_path)
        server_log.info("Carregando %s...", model)
        if not model.is_file():
            raise FileNotFoundError(f"Arquivo GGUF não encontrado: {args.gguf_path}")
        with model.open("rb") as f:  # sanitizer.py GGUFSanitizer.validate: magic first
            if f.read(4) != b"GGUF":
                raise RuntimeError("Magic number inválido (não é arquivo GGUF)")
        hip.initialize()
        state["arch"] = device["arch"]
        report("kernels", {"cwd": os.getcwd(), **hip.load_kernels(device["arch"])})
    except Exception as exc:
        server_log.error("Falha ao carregar o modelo, encerrando: %s", exc)
        sys.exit(1)
    state["created"] = int(time.time())
    server_log.info("Modelo carregado. Servindo em http://%s:%d", args.host, args.port)
    standin.serve(Handler, args.port, args.host, exit_on_sigterm=False)


if __name__ == "__main__":
    main()
