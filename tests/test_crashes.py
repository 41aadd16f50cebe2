"""Crashes that explain themselves, with real engine processes through the real app:
an engine that executes an illegal instruction at start (a C program compiled here) is
reported as SIGILL with the engine's advice, spawned once for three requests and held
off; an engine killed mid-answer is reported as SIGKILL on each API surface."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from lemoncore import Settings, create_app, hookimpl
from lemoncore.cli import control
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.recipes import Backend, DeviceKind, ModelInfo, Recipe, SupportRow

pytestmark = pytest.mark.anyio
HOST = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),))
TINY = Path(__file__).with_name("tinyserver.py")
ADVICE = "use the portable build of the test engine (its own advice)"
CHAT = {"messages": [{"role": "user", "content": "hi"}]}

# Executes an illegal instruction right after saying it starts (x86: __builtin_trap is
# ud2; on arm64 it is brk, a SIGTRAP, so udf #0 there), counting its runs in argv[1].
# Core dumps are turned off first: a test crash must not leave one behind.
ILLEGAL = r"""
#include <stdio.h>
#include <sys/resource.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
int main(int argc, char **argv) {
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
#ifdef __linux__
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
#endif
    FILE *runs = fopen(argv[1], "a");
    if (runs) { fputs("ran\n", runs); fclose(runs); }
    puts("tiny engine: loading the model");
    fflush(stdout);
#if defined(__aarch64__)
    __asm__ volatile(".inst 0x00000000");
#else
    __builtin_trap();
#endif
    return 0;
}
"""

# Answers /health; each POST counts its run, then kills itself with SIGKILL (or the signal
# named in argv[3]): a stream after its first event, anything else before answering. The
# SIGILL case is llama-server's on an AMX CPU: ready, then dead at the first matrix
# multiply (llama.cpp b11434 ggml/src/ggml-cpu/amx/mmq.cpp ggml_backend_amx_mul_mat ->
# tinygemm_kernel_amx, tilezero; llama.cpp PR #26954).
DIES = """
import os, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
with open(sys.argv[2], "a") as runs:
    runs.write("ran\\n")
print("dying engine: ready", flush=True)
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"{}")
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if b'"stream": true' in body or b'"stream":true' in body:
            self.send_response(200); self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked"); self.end_headers()
            event = (b'data: {"id": "c", "object": "chat.completion.chunk", "created": 0, '
                     b'"model": "dies", "choices": [{"index": 0, "delta": {"role": '
                     b'"assistant", "content": "Hel"}, "finish_reason": null}]}\\n\\n')
            self.wfile.write(b"%x\\r\\n%s\\r\\n" % (len(event), event)); self.wfile.flush()
        print("dying engine: killed mid-answer", flush=True)
        os.kill(os.getpid(), getattr(signal, sys.argv[3] if len(sys.argv) > 3 else "SIGKILL"))
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


class Engines:
    """Recipe ``crashy``: model ``sigill`` runs the illegal-instruction program (with
    SIGILL advice), ``dies`` the engine that kills itself mid-answer (``dies-sigill``: of
    SIGILL, at its first matrix multiply as it were), ``healthy`` the tiny server."""

    def __init__(self, root: Path, illegal: Path | None = None) -> None:
        (root / "cache" / "models").mkdir(parents=True, exist_ok=True)
        (root / "cache" / "models" / "w.bin").write_bytes(b"w")
        (root / "dies.py").write_text(DIES)
        self.root, self.illegal = root, illegal

    def runs(self, model: str) -> int:
        path = self.root / f"{model}.runs"
        return len(path.read_text().splitlines()) if path.exists() else 0

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        row = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})
        return [
            Recipe(
                name="crashy",
                display_name="Crashy",
                backends=(Backend(name="cpu", support=(row,)),),
            )
        ]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        weights = f"file:{self.root}/cache/models/w.bin"
        return [
            ModelInfo(name=name, recipe="crashy", checkpoint=weights)
            for name in ("sigill", "dies", "dies-sigill", "healthy")
        ]

    @hookimpl
    def install(self) -> InstallPlan:
        return InstallPlan("1", location=self.root)

    @hookimpl
    def launch(self, model: ModelInfo, context: LaunchContext) -> LaunchSpec:
        runs = str(self.root / f"{model.name}.runs")
        if model.name == "sigill":
            assert self.illegal is not None
            return LaunchSpec(argv=(str(self.illegal), runs), crash_advice={"SIGILL": ADVICE})
        if model.name.startswith("dies"):
            signal = "SIGILL" if model.name == "dies-sigill" else "SIGKILL"
            return LaunchSpec(
                argv=(sys.executable, str(self.root / "dies.py"), str(context.port), runs, signal),
                crash_advice={"SIGILL": ADVICE},
            )
        return LaunchSpec(
            argv=(
                sys.executable,
                str(TINY),
                "--port",
                str(context.port),
                "--name",
                model.name,
                "--model",
                str(context.model_path),
                "--ctx-size",
                "1",
                "--registry",
                str(self.root / "reg"),
            )
        )


@asynccontextmanager
async def lemon(engines: Engines) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        Settings(cache_dir=engines.root / "cache", plugins_allow="", max_loaded_models=3),
        plugins={"crashy": engines},
        host=HOST,
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost", timeout=30
        ) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def illegal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The illegal-instruction program, compiled here."""
    compiler = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if compiler is None or sys.platform == "win32":
        pytest.skip("no C compiler (cc, gcc or clang) to build the SIGILL engine")
    root = tmp_path_factory.mktemp("sigill")
    (root / "illegal.c").write_text(ILLEGAL)
    subprocess.run(
        [compiler, "-O0", "-o", str(root / "illegal"), str(root / "illegal.c")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return root / "illegal"


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


def lemon_ps(
    health: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """What ``lemon ps`` prints for a server whose ``/api/v1/health`` answers ``health``."""

    class Remote:
        @staticmethod
        def from_args(args: argparse.Namespace) -> Remote:
            return Remote()

        def get(self, path: str) -> dict[str, Any]:
            assert path == "/api/v1/health"
            return health

    monkeypatch.setattr(control, "Remote", Remote)
    capsys.readouterr()
    assert control.cmd_ps(argparse.Namespace(json=False, server=None)) == 0
    return capsys.readouterr().out


async def test_an_engine_dying_of_sigill_at_start_explains_itself_and_is_held_off(
    tmp_path: Path,
    illegal: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    anyio_backend: str,
) -> None:
    engines = Engines(tmp_path, illegal)
    explanation = (
        "died of SIGILL (illegal instruction) while starting: this engine uses "
        f"CPU instructions this machine cannot run. U{ADVICE[1:]}."
    )
    async with lemon(engines) as c:
        assert (
            await c.post("/api/v1/load", json={"model_name": "healthy"})
        ).status_code == 200  # another model a retry would evict to free memory
        answers = [
            await c.post("/v1/chat/completions", json={**CHAT, "model": "sigill"}) for _ in range(3)
        ]  # as a client that retries every 5xx would send them
        first, *held = answers
        assert first.status_code == 503
        assert all(a.headers["x-should-retry"] == "false" for a in answers)  # openai obeys it
        assert error_of(first)["code"] == "backend_start_failed"
        message = error_of(first)["message"]
        assert f"sigill: backend {explanation}" in message
        assert "Last output:\ntiny engine: loading the model" in message
        assert "held off for 300 s" in message
        for refused in held:  # refused, not spawned: the same explanation
            assert refused.status_code == 503
            assert error_of(refused)["code"] == "backend_cooldown"
            assert explanation in error_of(refused)["message"]
            assert "tiny engine: loading the model" in error_of(refused)["message"]
            assert int(refused.headers["retry-after"]) > 60  # the openai client's limit
        assert engines.runs("sigill") == 1  # no retry, no evict-and-retry
        health = (await c.get("/api/v1/health")).json()
        assert [m["model_name"] for m in health["all_models_loaded"]] == ["healthy"]
        [entry] = health["held_off"]
        assert entry["model"] == "sigill" and entry["failures"] == 1
        assert entry["reason"] == f"sigill: backend {explanation}"
        assert 60 < entry["retry_in_s"] <= 300
        monkeypatch.setenv("LEMON_CACHE_DIR", str(tmp_path / "ps"))  # no workers here
        ps = lemon_ps(health, monkeypatch, capsys)
        assert "healthy" in ps.split("held off")[0]  # the loaded model's table comes first
        assert re.search(
            r"^held off: sigill \(1 failed start; requests may start it again "
            r"in \d+ min, 'lemon load sigill' retries now\): sigill: backend died "
            r"of SIGILL \(illegal instruction\) while starting: this engine uses "
            r"CPU instructions this machine cannot run\. Use the portable build",
            ps,
            re.MULTILINE,
        ), ps
        assert 'lemon_evictions_total{reason="load_failure"} 0' in (await c.get("/metrics")).text
        again = await c.post("/api/v1/load", json={"model_name": "sigill"})  # the user's retry
        assert error_of(again)["code"] == "backend_start_failed"
        assert explanation in error_of(again)["message"]
        assert engines.runs("sigill") == 2
        [entry] = (await c.get("/api/v1/health")).json()["held_off"]
        assert entry["failures"] == 2


async def test_an_engine_killed_mid_answer_is_named_on_each_surface(
    tmp_path: Path, anyio_backend: str
) -> None:
    engines = Engines(tmp_path)
    said = (
        "the backend died of SIGKILL (killed: out of memory?) while answering: something "
        "outside the engine killed it, most often the kernel's out-of-memory killer."
    )
    async with lemon(engines) as c:
        with capture_logs() as logs:
            streamed = await c.post(
                "/v1/chat/completions", json={**CHAT, "model": "dies", "stream": True}
            )
        assert streamed.status_code == 200
        events = [line[5:] for line in streamed.text.splitlines() if line.startswith("data:")]
        assert '"Hel"' in events[0]  # the answer began, then the engine died
        error = json.loads(events[-1])["error"]
        assert error["code"] == "backend_error"
        assert error["message"].startswith(f"backend stream broke: {said}")
        assert error["message"].endswith(
            "Last output:\ndying engine: ready\ndying engine: killed mid-answer"
        )
        [warning] = [e for e in logs if e["event"].startswith("model unloaded: backend crashed")]
        assert warning["signal"] == "SIGKILL" and warning["log_level"] == "warning"
        assert warning["reason"].startswith("died of SIGKILL (killed: out of memory?): ")
        health = (await c.get("/api/v1/health")).json()
        assert health["all_models_loaded"] == [] and health["held_off"] == []

        anthropic = await c.post(
            "/v1/messages", json={**CHAT, "model": "dies", "max_tokens": 8, "stream": True}
        )
        assert anthropic.status_code == 200
        last = json.loads(anthropic.text.strip().splitlines()[-1][5:])
        assert last["type"] == "error" and last["error"]["type"] == "api_error"
        assert said in last["error"]["message"]

        runs = engines.runs("dies")
        answered = await c.post("/v1/chat/completions", json={**CHAT, "model": "dies"})
        assert answered.status_code == 502  # retried once on a fresh engine, which died too
        assert error_of(answered)["message"].startswith(f"backend connection failed: {said}")
        assert engines.runs("dies") == runs + 2


async def test_an_engine_dying_of_sigill_while_answering_is_not_retried_and_held_off(
    tmp_path: Path, anyio_backend: str
) -> None:
    """An engine that starts, then dies of SIGILL at the first request (llama.cpp's AMX
    kernels run at the first matrix multiply): a fresh engine would die the same way, so
    the request is not retried, and the model is held off with the explanation."""
    engines = Engines(tmp_path)
    async with lemon(engines) as c:
        answered = await c.post("/v1/chat/completions", json={**CHAT, "model": "dies-sigill"})
        assert answered.status_code == 502
        assert answered.headers["x-should-retry"] == "false"
        message = error_of(answered)["message"]
        assert "died of SIGILL (illegal instruction) while answering" in message
        assert "CPU instructions this machine cannot run" in message and ADVICE[1:] in message
        assert engines.runs("dies-sigill") == 1  # not retried on a fresh engine
        again = await c.post("/v1/chat/completions", json={**CHAT, "model": "dies-sigill"})
        assert again.status_code == 503 and error_of(again)["code"] == "backend_cooldown"
        assert "SIGILL" in error_of(again)["message"]
        assert again.headers["x-should-retry"] == "false"
        assert engines.runs("dies-sigill") == 1  # held off: not spawned again
        [entry] = (await c.get("/api/v1/health")).json()["held_off"]
        assert entry["model"] == "dies-sigill" and "SIGILL" in entry["reason"]


async def test_the_openai_client_does_not_retry_an_engine_that_dies_of_sigill(
    tmp_path: Path, illegal: Path, anyio_backend: str
) -> None:
    """The openai client retries a 503 twice by default; x-should-retry: false stops it
    (openai 3.57 _base_client.py _should_retry), so one request costs one spawn."""
    import openai

    engines = Engines(tmp_path, illegal)
    sent: list[str] = []

    async def count(request: httpx.Request) -> None:
        sent.append(request.url.path)

    async with lemon(engines) as c:
        c.event_hooks["request"].append(count)
        client = openai.AsyncOpenAI(
            base_url="http://localhost/v1", api_key="none", http_client=c
        )  # default max_retries: 2
        with pytest.raises(openai.InternalServerError) as failed:
            await client.chat.completions.create(model="sigill", messages=CHAT["messages"])
    assert "CPU instructions this machine cannot run" in str(failed.value)
    assert sent == ["/v1/chat/completions"] and engines.runs("sigill") == 1


async def test_the_events_say_what_happened_to_each_model(
    tmp_path: Path, illegal: Path, anyio_backend: str
) -> None:
    """``/api/v1/events`` (the Status tab's source) tells an asked-for unload from an
    eviction, and records a crash and a failed start; ``/metrics`` counts the crash."""
    engines = Engines(tmp_path, illegal)
    async with lemon(engines) as c:
        assert (await c.post("/api/v1/load", json={"model_name": "healthy"})).status_code == 200
        assert (await c.post("/api/v1/unload", json={"model_name": "healthy"})).status_code == 200
        dead = await c.post("/v1/chat/completions", json={**CHAT, "model": "dies", "stream": True})
        assert "backend stream broke" in dead.text
        failed = await c.post("/v1/chat/completions", json={**CHAT, "model": "sigill"})
        assert failed.status_code == 503
        answer = await c.get("/api/v1/events")
        assert answer.status_code == 200
        seen = [(e["model"], e["event"], e["kind"]) for e in answer.json()["data"]]
        assert seen == [
            ("healthy", "loaded", None),
            ("healthy", "unloaded", "unload"),
            ("dies", "loaded", None),
            ("dies", "crashed", None),
            ("sigill", "load_failed", None),
        ]
        reasons = [e["reason"] for e in answer.json()["data"]]
        assert reasons[1] == "unload requested" and reasons[2] == "crashy:cpu on cpu"
        assert reasons[3].startswith("died of SIGKILL")
        assert "SIGILL" in reasons[4] and "\n" not in reasons[4]
        assert answer.json()["crashes"] == {"dies": 1}
        assert [e["model"] for e in (await c.get("/api/v1/events?limit=2")).json()["data"]] == [
            "dies",
            "sigill",
        ]
        assert (await c.get("/api/v1/events?limit=0")).status_code == 400
        assert 'lemon_backend_crashes_total{model="dies"} 1' in (await c.get("/metrics")).text
