"""The router's parts below the HTTP app: the planner's decisions from plain facts, the
admission bookkeeping, planning that reads only the status cache, and wedge detection
fed by streamed requests (a real backend process whose streams break)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from lemoncore import Settings, create_app, hookimpl
from lemoncore.api.replies import LoadPlanReply
from lemoncore.core import build_core
from lemoncore.exits import classify
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.installs.backends import Backends, BackendState, BackendStatus
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.recipes import (
    Backend,
    Device,
    DeviceKind,
    ModelInfo,
    ModelType,
    Recipe,
    SlotPolicy,
    SupportRow,
)
from lemoncore.serving.admission import (
    COOLDOWN_MAX_S,
    CRASH_LOOP_FAILURES,
    WEDGED_AFTER,
    Admission,
    NotAdmitted,
)
from lemoncore.serving.eviction import Resident
from lemoncore.serving.planner import CurrentLoad, Facts, plan
from lemoncore.supervisor import StartError

HOST = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),))
ROW = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})
RECIPE = Recipe(
    name="r",
    display_name="R",
    backends=(Backend(name="fast", support=(ROW,)), Backend(name="slow", support=(ROW,))),
)
MODEL = ModelInfo(name="m", recipe="r", checkpoint="o/r:m.gguf")


class Hooks:
    """Decision hooks: every backend on the CPU, one policy per backend name."""

    def effective_device(
        self, recipe: Recipe, backend: Backend, options: Any, host: HostInfo
    ) -> Device:
        return Device.CPU

    def effective_is_amd_gpu(
        self, recipe: Recipe, backend: Backend, options: Any, host: HostInfo
    ) -> bool:
        return False

    def slot_policy(
        self, recipe: Recipe, backend: Backend, options: Any, host: HostInfo
    ) -> SlotPolicy:
        return SlotPolicy.STANDARD


def facts(
    states: dict[str, BackendState],
    residents: Sequence[Resident] = (),
    loaded: CurrentLoad | None = None,
    max_loaded: int = 1,
) -> Facts:
    statuses = [BackendStatus("r", b, states[b.name]) for b in RECIPE.backends]
    return Facts(MODEL, RECIPE, {}, {}, "saved.json", statuses, residents, loaded, None, max_loaded)


def resident(name: str, last_used: float = 0.0) -> Resident:
    return Resident(
        name, ModelType.LLM, Device.CPU, False, SlotPolicy.STANDARD, False, False, last_used
    )


INSTALLABLE, INSTALLED = BackendState.INSTALLABLE, BackendState.INSTALLED


@pytest.mark.parametrize(
    ("states", "request_", "backend"),
    [
        ({"fast": INSTALLABLE, "slow": INSTALLED}, None, "slow"),  # installed first
        ({"fast": INSTALLED, "slow": INSTALLED}, None, "fast"),  # then declaration order
        ({"fast": INSTALLED, "slow": INSTALLABLE}, {"backend": "slow"}, "slow"),  # asked for
    ],
)
def test_the_planner_chooses_the_backend(
    states: dict[str, BackendState], request_: dict[str, Any] | None, backend: str
) -> None:
    assert plan(facts(states), request_, Hooks(), HOST).backend.backend.name == backend


def test_the_planner_evicts_through_the_policy_and_tells_a_reload_from_a_no_op() -> None:
    both = {"fast": INSTALLED, "slow": INSTALLED}
    full = plan(
        facts(both, [resident("old", 1.0), resident("older", 0.0)], max_loaded=2),
        None,
        Hooks(),
        HOST,
    )
    assert [(e.name, e.kind) for e in full.decision.evict] == [("older", "lru")]
    same = facts(both, [resident("m")], CurrentLoad("fast", {}))
    assert plan(same, None, Hooks(), HOST).already_loaded
    moved = plan(same, {"backend": "slow"}, Hooks(), HOST)
    assert moved.reload and [(e.name, e.kind) for e in moved.decision.evict] == [("m", "reload")]
    # a request (implicit) uses the loaded server as it is
    assert not plan(same, {"backend": "slow"}, Hooks(), HOST, explicit=False).reload
    shown = LoadPlanReply.of(moved)  # a dry run's answer
    assert [(e.model_name, e.kind) for e in shown.evict] == [("m", "reload")]
    assert (shown.backend, shown.already_loaded, shown.refused) == ("slow", False, None)


def test_admission_holds_off_a_crash_loop_and_counts_wedged_requests() -> None:
    admission = Admission(Settings())
    for _ in range(CRASH_LOOP_FAILURES - 1):
        admission.failed_start("m", StartError("boom"), "c.gguf")
        admission.check_cooldown("m", "c.gguf")  # not yet held off
    assert "held off" in str(admission.failed_start("m", StartError("boom"), "c.gguf"))
    with pytest.raises(NotAdmitted, match="failed to start 3 times") as refused:
        admission.check_cooldown("m", "c.gguf")
    assert refused.value.status == 503 and refused.value.headers == {"Retry-After": "5"}
    assert "The last failure: boom" in str(refused.value)
    [held] = admission.held_off()
    assert (held.model, held.reason, held.failures) == ("m", "boom", 3)
    assert 0 < held.retry_in_s <= 5
    admission.started("m")
    admission.check_cooldown("m", "c.gguf")
    assert admission.held_off() == []

    class Server:
        failures = 0

    server: Any = Server()
    assert not any(admission.wedged_after(server, failed=True) for _ in range(WEDGED_AFTER - 1))
    assert not admission.wedged_after(server, failed=False)  # a success resets the count
    assert [admission.wedged_after(server, failed=True) for _ in range(WEDGED_AFTER)][-1]


def test_a_start_that_cannot_succeed_again_is_held_off_at_once_with_its_reason() -> None:
    admission = Admission(Settings())
    sigill = classify(
        -int(signal.SIGILL), ["llama_model_load: loading"], {"SIGILL": "use the portable build"}
    )
    failed = admission.failed_start(
        "m", StartError(sigill.report("m: backend", "while starting"), sigill), "c.gguf"
    )
    assert failed.exit is sigill and "starting it again cannot help: held off" in str(failed)
    with pytest.raises(NotAdmitted) as refused:  # the first failure is enough
        admission.check_cooldown("m", "c.gguf")
    message = str(refused.value)
    assert refused.value.code == "backend_cooldown" and "failed to start once" in message
    assert (
        "died of SIGILL (illegal instruction) while starting: this engine uses CPU "
        "instructions this machine cannot run. Use the portable build." in message
    )
    assert message.endswith("Last output:\nllama_model_load: loading")
    assert refused.value.retry_after is not None and refused.value.retry_after > 60
    [held] = admission.held_off()
    assert held.reason == sigill.sentence("m: backend", "while starting")
    assert held.failures == 1 and 60 < held.retry_in_s <= COOLDOWN_MAX_S
    admission.check_cooldown("m", "other.gguf")  # the name now means another model
    failed = admission.failed_start("m", StartError("boom"), "other.gguf")
    assert "held off" not in str(failed)  # that one's count starts at one
    # a plain exit code is counted toward the crash loop, as before
    plain = classify(1, ["boom"])
    admission.failed_start("n", StartError(plain.report("n: backend"), plain), "c.gguf")
    admission.check_cooldown("n", "c.gguf")


# A backend whose streams break after one event: it drops the connection mid-response.
BREAKS = """
import socket, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"{}")
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked"); self.end_headers()
        event = b'data: {"choices": [{"delta": {"content": "x"}}]}\\n\\n'
        self.wfile.write(b"%x\\r\\n%s\\r\\n" % (len(event), event)); self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)  # no last chunk: the stream broke
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


class Engine:
    """Recipe ``r`` with a backend installed at a location; ``m`` is a local file."""

    def __init__(self, root: Path) -> None:
        (root / "cache" / "models").mkdir(parents=True, exist_ok=True)
        (root / "cache" / "models" / "m.bin").write_bytes(b"m")
        (root / "breaks.py").write_text(BREAKS)
        self.root, self.install_calls = root, 0

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        return [RECIPE]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [ModelInfo(name="m", recipe="r", checkpoint=f"file:{self.root}/cache/models/m.bin")]

    @hookimpl
    def install(self) -> InstallPlan:
        self.install_calls += 1
        return InstallPlan("1", location=self.root)

    @hookimpl
    def launch(self, context: LaunchContext) -> LaunchSpec:
        return LaunchSpec(argv=(sys.executable, str(self.root / "breaks.py"), str(context.port)))


@pytest.mark.anyio
async def test_planning_reads_the_status_cache_and_runs_no_status_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    engine = Engine(tmp_path)
    core = build_core(
        Settings(cache_dir=tmp_path / "cache", plugins_allow=""),
        plugins={"engine": engine},
        host=HOST,
    )
    async with core.router:
        await core.backends.refresh_statuses()
        calls = engine.install_calls

        def no_status_checks(*args: Any) -> BackendStatus:
            raise AssertionError("a status was computed while planning")

        monkeypatch.setattr(Backends, "status", no_status_checks)
        planned = await core.router.plan("m")
        assert planned.backend.state is INSTALLED and planned.backend.backend.name == "fast"
        assert engine.install_calls == calls  # no plugin install hook ran either


@pytest.mark.anyio
async def test_broken_streams_count_toward_wedge_detection(
    tmp_path: Path, anyio_backend: str
) -> None:
    app = create_app(
        Settings(cache_dir=tmp_path / "cache", plugins_allow=""),
        plugins={"engine": Engine(tmp_path)},
        host=HOST,
    )
    chat = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://localhost") as c,
    ):
        pids = set()
        for _ in range(WEDGED_AFTER):
            reply = await c.post("/v1/chat/completions", json=chat)
            assert reply.status_code == 200 and "backend stream broke" in reply.text
            pids |= {m["pid"] for m in (await c.get("/api/v1/health")).json()["all_models_loaded"]}
        with anyio.fail_after(10):  # the third broken stream restarts it
            while 'reason="wedged"} 1' not in (await c.get("/metrics")).text:
                await anyio.sleep(0.02)
        assert len(pids) == 1


@pytest.mark.anyio
async def test_an_invalidation_during_a_refresh_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    core = build_core(
        Settings(cache_dir=tmp_path / "cache", plugins_allow=""),
        plugins={"engine": Engine(tmp_path)},
        host=HOST,
    )
    computed = []
    real = Backends.statuses

    def install_finishing_meanwhile(backends: Backends, recipe: Recipe) -> list[BackendStatus]:
        computed.append(recipe.name)
        if len(computed) == 1:
            backends.invalidate()  # an install ends while the thread computes
        return real(backends, recipe)

    monkeypatch.setattr(Backends, "statuses", install_finishing_meanwhile)
    await core.backends.refresh_statuses()
    await core.backends.refresh_statuses()
    assert computed == ["r", "r"]  # the second refresh did not trust the stale answer
    await core.backends.refresh_statuses()
    assert computed == ["r", "r"]  # and then the cache holds
