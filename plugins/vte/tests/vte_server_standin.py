"""A stand-in ``vte-server`` that behaves as VTE 0.3.7's source does, for machines without
Windows or an RDNA3 GPU. Standard library only. Each behaviour cites the file and function
of VTE's source (tag ``0.3.7``) it reproduces; ``../../shared/reference/vte.md``, section
"VTE 0.3.7 as its source behaves", has the line numbers.

What stands in for the hardware: ``VTE_STANDIN_HIP_DEVICES`` is a JSON list of the HIP
device names in HIP order (what ``hipGetDeviceCount``/``hipGetDeviceProperties`` would
return); the HIP DLL is any ``amdhip64*.dll`` file in ``%HIP_PATH%\\bin`` or on ``PATH``.

It is not a model: the reply repeats the last user message word by word, one word per
"token", ``VTE_STANDIN_TOKEN_S`` (default 0.02) seconds each, after a prefill of
``VTE_STANDIN_PREFILL_S`` (default 0) seconds. ``VTE_STANDIN_HOLD`` names a file: each
generation's prefill then lasts until that file exists, so a test, not a timer, decides
when it ends (not VTE's; a stand-in for a prefill of unknown length). ``VTE_STANDIN_REPORT``
names a file that receives the argv, the environment VTE reads, the device chosen and every
request body, as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

from lemoncore.plugin import standin

# vte/config.py GPU_ARCH_MAP, dict order (the plugin keeps its own copy in vte_source.py;
# this one is typed out again from VTE's source so a wrong copy there is caught here).
GPU_ARCH_MAP = {
    "rx 7600": "gfx1102",
    "rx 7600 xt": "gfx1101",
    "rx 7700": "gfx1101",
    "rx 7700 xt": "gfx1101",
    "rx 7800 xt": "gfx1101",
    "rx 7900": "gfx1100",
    "rx 7900 xt": "gfx1100",
    "rx 7900 xtx": "gfx1100",
    "rx 6600": "gfx1032",
    "rx 6600 xt": "gfx1032",
    "rx 6650 xt": "gfx1032",
    "rx 6700": "gfx1031",
    "rx 6700 xt": "gfx1031",
    "rx 6750 xt": "gfx1031",
    "rx 6800": "gfx1030",
    "rx 6800 xt": "gfx1030",
    "rx 6900": "gfx1030",
    "rx 6900 xt": "gfx1030",
    "rx 6950 xt": "gfx1030",
    "rx 6500 xt": "gfx1034",
    "rx 6400": "gfx1034",
}
BUSY = "O VTE já está gerando outra resposta; esta instância processa um pedido por vez."
TOKEN_S = float(os.environ.get("VTE_STANDIN_TOKEN_S", "0.02"))
PREFILL_S = float(os.environ.get("VTE_STANDIN_PREFILL_S", "0"))
REPORT = os.environ.get("VTE_STANDIN_REPORT")
HOLD = os.environ.get("VTE_STANDIN_HOLD")
TIMINGS = {"prefill_duration_ttft": 0.01, "decoding_speed_tps": 50.0}  # in VTE's usage
ENV_KEYS = ("PATH", "HIP_PATH", "VTE_TARGET_ARCH_FAMILY", "VTE_DEVICE_INDEX", "PYTHONNOUSERSITE")

# vte/bridge/logger.py get_logger: "<asctime> [<LEVEL>] <logger>: <msg>" on stdout.
logging.basicConfig(
    stream=sys.stdout,
    level=logging.INFO,
    format="%(asctime)s [%(levelname)s] %(name)s: %(message)s",
)
hip_log, server_log = logging.getLogger("VTE.HIP"), logging.getLogger("VTE.Server")


class HIPRuntimeError(Exception):
    pass


def report(kind: str, data: object) -> None:
    if REPORT:
        with open(REPORT, "a") as out:
            out.write(json.dumps({"kind": kind, "data": data}) + "\n")


def prefill() -> None:
    """The prefill: ``PREFILL_S``, and until the ``HOLD`` file exists (at most a minute, so a
    test that never releases it still ends)."""
    standin.wait_for_file(HOLD)
    time.sleep(PREFILL_S)


def gpu_arch(name: str) -> str | None:
    """hip_runtime.py get_gpu_architecture: first substring hit in dict order."""
    lowered = name.lower()
    return next((arch for key, arch in GPU_ARCH_MAP.items() if key in lowered), None)


def find_hip_dll() -> Path:
    """hip_runtime.py DLL discovery: %HIP_PATH%\\bin, then PATH (Windows separators)."""
    folders = [Path(os.environ["HIP_PATH"]) / "bin"] if os.environ.get("HIP_PATH") else []
    folders += [Path(p) for p in os.environ.get("PATH", "").split(";") if p]
    for folder in folders:
        found = sorted(folder.glob("amdhip64*.dll")) if folder.is_dir() else []
        if found:
            return found[-1]
    raise HIPRuntimeError(
        "amdhip64.dll não encontrada. Instale o AMD HIP SDK: "
        "https://www.amd.com/en/developer/resources/rocm-hub/hip-sdk.html"
    )


def select_device_index(devices: list[str]) -> int:
    """hip_runtime.py HIPRuntime._select_device_index, branch by branch."""
    forced = os.environ.get("VTE_DEVICE_INDEX")
    if forced is not None:  # wins outright: no enumeration, no map, no family check
        hip_log.info("VTE_DEVICE_INDEX=%s (override manual, sem auto-detecção).", forced)
        return int(forced)  # a non-integer: ValueError, exit 1
    family = os.environ.get("VTE_TARGET_ARCH_FAMILY")
    prefix = family[:-1] if family is not None else None
    count = len(devices)
    if count <= 1:
        if family is not None and count == 1:
            arch = gpu_arch(devices[0])
            if arch is None or not arch.startswith(prefix or ""):
                raise HIPRuntimeError(
                    f"VTE_TARGET_ARCH_FAMILY={family}, mas o único device HIP visível "
                    f"('{devices[0]}', arch {arch or 'desconhecida'}) não pertence a essa "
                    "família."
                )
        return 0  # one device, or none: hipSetDevice(0) decides
    mapped = [
        (i, name, arch) for i, name in enumerate(devices) if (arch := gpu_arch(name)) is not None
    ]  # iGPUs are not in the map
    if prefix is not None:
        kept = [m for m in mapped if m[2].startswith(prefix)]
        if not kept:
            seen = ", ".join(f"('{n}', {gpu_arch(n) or 'desconhecida'})" for n in devices)
            raise HIPRuntimeError(
                f"VTE_TARGET_ARCH_FAMILY={family}, mas nenhum dos {count} devices HIP "
                f"visíveis pertence a essa família ({seen}). Recusando escolher uma "
                "geração não validada."
            )
        mapped = kept
    if not mapped:
        hip_log.warning(
            "Nenhum dos %d devices HIP visíveis bate com uma arquitetura "
            "conhecida (%s); usando device 0 como fallback.",
            count,
            ", ".join(devices),
        )
        return 0
    index, name, _ = mapped[0]
    if len(mapped) == 1:
        hip_log.info(
            "GPU selecionada: %s (device %d) entre %d devices HIP visíveis.", name, index, count
        )
    else:
        hip_log.warning(
            "Múltiplas GPUs AMD suportadas detectadas (%s); usando a primeira "
            "(%s, device %d). Defina VTE_DEVICE_INDEX para escolher outra "
            "explicitamente.",
            ", ".join(m[1] for m in mapped),
            name,
            index,
        )
    return index


def initialize() -> tuple[int, str, str]:
    """hip_runtime.py HIPRuntime.initialize: DLL, selection, hipSetDevice, the init line."""
    find_hip_dll()
    devices = json.loads(os.environ.get("VTE_STANDIN_HIP_DEVICES", "[]"))
    index = select_device_index(devices)
    if not devices:
        raise HIPRuntimeError("hipInit falhou com código 100")
    if not 0 <= index < len(devices):
        raise HIPRuntimeError(f"hipSetDevice({index}) falhou com código 101")
    name = devices[index]
    arch = gpu_arch(name)
    if arch is None:
        hip_log.warning(
            "Arquitetura para GPU '%s' não mapeada. Usando fallback gfx1100.", name.lower()
        )
        arch = "gfx1100"
    hip_log.info("HIP Inicializado. GPU: %s | Arch: %s | CUs: 32 | VRAM: 8176 MB", name, arch)
    return index, name, arch


# http_server.py _parse_args: argparse errors exit 2.
parser = argparse.ArgumentParser(prog="vte-server")
parser.add_argument("--gguf-path", required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--context-length", type=int, default=None)
parser.add_argument("--idle-timeout", type=int, default=60)
parser.add_argument("--vram-limit-pct", type=float, default=80.0)
parser.add_argument("--parent-pid", type=int)
args = parser.parse_args()
report("start", {"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in ENV_KEYS}})


def stop(signum: int, frame: object) -> None:
    """http_server.py _install_signal_handlers: SIGINT (and SIGBREAK) unload and exit 0;
    there is no SIGTERM handler."""
    server_log.info("Sinal %d recebido -- encerrando graciosamente.", signum)
    sys.exit(0)


signal.signal(signal.SIGINT, stop)


def parent_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def watch_parent(pid: int) -> None:
    """http_server.py _start_parent_watchdog: every 5 s (0.5 s here); gone: exit 0."""
    while parent_alive(pid):
        time.sleep(0.5)
    server_log.warning(
        "Processo pai (PID %d) não existe mais -- encerrando e liberando VRAM (watchdog de órfão).",
        pid,
    )
    os._exit(0)


if args.parent_pid:
    threading.Thread(target=watch_parent, args=(args.parent_pid,), daemon=True).start()

# http_server.py cli_main: preflight (HIP init + selection) before the path check; any
# failure logs one line and exits 1, and no port is ever bound.
try:
    index, device_name, device_arch = initialize()
    report("device", {"index": index, "name": device_name, "arch": device_arch})
    model = Path(args.gguf_path)
    server_log.info("Carregando %s...", model)
    if not model.is_file():
        raise FileNotFoundError(f"Arquivo GGUF não encontrado: {model}")
    with model.open("rb") as f:  # sanitizer.py GGUFSanitizer.validate: magic first
        if f.read(4) != b"GGUF":
            raise HIPRuntimeError("Magic number inválido (não é arquivo GGUF)")
    time.sleep(0.3)  # loading: the port opens only afterwards
except Exception as exc:
    server_log.error("Falha ao carregar o modelo, encerrando: %s", exc)
    sys.exit(1)
server_log.info("Modelo carregado. Servindo em http://%s:%d", args.host, args.port)

# http_server.py: one generation per process (a non-blocking threading.Lock), and one
# event loop: a non-streaming generation runs on the loop and blocks every request,
# /health included; a stream runs in VTE-GenerationThread and leaves the loop free.
generation = threading.Lock()
event_loop = threading.Lock()
CREATED = int(time.time())


def words_of(messages: list[dict[str, str]]) -> tuple[int, list[str]]:
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages) + 8
    last = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    return prompt_tokens, str(last.get("content", "")).split() or ["..."]


class Handler(standin.Handler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        with event_loop:
            if self.path == "/health":
                self.send_json(200, {"status": "ready"})
            elif self.path == "/v1/models":
                self.send_json(200, standin.models(model.stem, "vte", CREATED))
            else:
                self.send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        event_loop.acquire()
        try:
            self.post()
        finally:
            if event_loop.locked():
                event_loop.release()

    def post(self) -> None:
        try:
            body = self.read_json()
        except ValueError:
            self.send_json(400, standin.error("Corpo da requisição não é um JSON válido."))
            return
        chat = self.path == "/v1/chat/completions"
        if self.path not in {"/v1/chat/completions", "/v1/completions"}:
            self.send_json(404, {"detail": "Not Found"})
            return
        if chat and not body.get("messages"):
            self.send_json(400, standin.error("Campo 'messages' ausente ou vazio na requisição."))
            return
        if not chat and "prompt" not in body:
            self.send_json(400, standin.error("Campo 'prompt' ausente."))
            return
        if not generation.acquire(blocking=False):  # _BUSY_RESPONSE: no Retry-After
            report("busy", {"path": self.path})
            self.send_json(429, standin.error(BUSY, "server_busy"))
            return
        report("request", {"path": self.path, "body": body})
        messages = body["messages"] if chat else [{"role": "user", "content": body["prompt"]}]
        prompt_tokens, words = words_of(messages)
        limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 512)
        out = words[:limit]
        finish = "length" if len(words) > limit else "stop"
        counts = {**standin.usage(prompt_tokens, len(out)), **TIMINGS}
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        if not (chat and body.get("stream")):  # completions never stream
            try:  # on the event loop: nothing else is served meanwhile; no disconnect check
                prefill()
                time.sleep(TOKEN_S * len(out))
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
        self,
        body: dict[str, object],
        ident: str,
        out: list[str],
        finish: str,
        counts: dict[str, object],
    ) -> None:
        """The stream; the generation thread works through the prefill and notices a
        disconnect only after its next visible piece, then releases the lock
        (``_generate_stream``'s ``finally``)."""
        try:
            events = self.open_events(("Connection", "close"))
            prefill()

            def now() -> standin.Head:  # each chunk's own time
                return standin.head(ident, body.get("model", "vte"))

            for i, word in enumerate(out):  # the role rides on the first content chunk
                time.sleep(TOKEN_S)
                piece: standin.Delta = {"content": " " + word}
                if not i:
                    piece = {"role": "assistant", "content": word}
                events.send(standin.answer(now(), [standin.delta(piece)], standin.CHUNK))
            events.send(
                {
                    **standin.answer(now(), [standin.delta({}, finish)], standin.CHUNK),
                    "usage": TIMINGS,
                }
            )
            options = body.get("stream_options") or {}
            if isinstance(options, dict) and options.get("include_usage"):
                events.send({**standin.answer(now(), [], standin.CHUNK), "usage": counts})
            events.done()
        except OSError:
            pass  # the client went away: stop_event, then the lock is released
        finally:
            generation.release()
            self.close_connection = True


standin.serve(Handler, args.port, args.host, exit_on_sigterm=False)
