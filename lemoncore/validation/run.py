"""The orchestration of ``lemon validate``: the validation's own server on the user's
installs (:mod:`~lemoncore.validation.server`), then install, model, load, the backend's
field checks, the conformance kit, a short benchmark, uninstall (only what it installed
itself), shutdown and cleanup, each a check in the :class:`~.report.Report`.

Decisions that need no process (the model to use, the pin to report, stand-in reasons)
are functions over data; :func:`validate` does the I/O.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from lemoncore import __version__
from lemoncore.bench import SCENARIOS, Sample, Target, peak_memory, select, spread, stream_once
from lemoncore.conformance import BackendConformance, ConformanceTarget, field_checks
from lemoncore.errors import LemonError
from lemoncore.fieldchecks import CheckSkipped, FieldCheck, FieldContext
from lemoncore.hosts import HostInfo, detect_host
from lemoncore.installs.install import RECORD
from lemoncore.settings import Settings
from lemoncore.validation import host as host_facts
from lemoncore.validation.kit import run_check, run_field_check
from lemoncore.validation.report import Report
from lemoncore.validation.server import SERVE, ServerProcess, running_elsewhere, serving, stop

NON_CHAT = {"embeddings", "embedding", "reranking", "transcription", "image", "tts"}
Ask = Callable[[str], bool]
Progress = Callable[[str], Callable[[int, int], None]]


class Refused(LemonError):
    """Validation cannot start; the message says why and what to do."""


@dataclass
class Options:
    backend: str  # recipe:backend
    model: str | None = None
    quick: bool = False
    yes: bool = False  # consent to installs and downloads without asking


@dataclass
class Run:
    """What the I/O needs besides the options (tests and embedders replace them)."""

    settings: Settings = field(default_factory=Settings)
    command: tuple[str, ...] = SERVE
    plugins: Mapping[str, object] | None = None  # in-process plugins, as the server has
    ask: Ask = lambda question: False
    progress: Progress | None = None
    say: Callable[[str], None] = lambda text: None
    host: HostInfo | None = None  # this machine (default: detected)


def choose_model(models: Iterable[Mapping[str, Any]], recipe: str, backend: str
                 ) -> Mapping[str, Any] | None:
    """The smallest chat model of ``recipe`` that ``backend`` serves (``/v1/models``
    cards): by published size, then already downloaded first, then by name."""
    fits = [m for m in models if m.get("recipe") == recipe
            and backend in {b.get("name") for b in m.get("backends", [])}
            and (m.get("recipe_options") or {}).get("backend") in {None, backend}
            and not NON_CHAT & set(m.get("labels") or ())]
    return min(fits, key=lambda m: (m.get("size_bytes") or float("inf"),
                                    not m.get("downloaded"), str(m["id"])), default=None)


def install_record(cache_dir: Path, backend: str) -> dict[str, Any] | None:
    """The installed version and artifacts (URL, SHA-256) lemoncore recorded, if any."""
    recipe, _, name = backend.partition(":")
    try:
        data = json.loads((cache_dir / "bin" / recipe / name / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return {k: data[k] for k in ("version", "artifacts", "result") if k in data}


def _headers(settings: Settings) -> dict[str, str]:
    key = settings.admin_api_key or settings.api_key
    return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}


def secrets(settings: Settings) -> list[str]:
    return [k.get_secret_value() for k in (settings.api_key, settings.admin_api_key) if k]


def _events(response: httpx.Response, progress: Callable[[int, int], None] | None
            ) -> dict[str, Any]:
    """Read an install or pull SSE stream; the ``complete`` data, or raise with the
    ``error``."""
    event = ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            if event == "progress" and progress is not None:
                progress(int(data["bytes_downloaded"]), int(data["bytes_total"]))
            elif event == "error":
                raise RuntimeError(data["error"])
            elif event == "complete":
                return dict(data)
    raise RuntimeError("the stream ended without a result")


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:500]


class _Validation:
    def __init__(self, options: Options, run: Run, server: ServerProcess) -> None:
        self.options, self.run, self.server = options, run, server
        self.recipe, _, self.name = options.backend.partition(":")
        self.client = httpx.Client(timeout=600, headers=_headers(run.settings))
        self.pids: set[int] = set()
        self.containers: set[tuple[str, str]] = set()  # (tool, name)
        self.installed_here = False

    def check(self, report: Report, group: str, name: str, description: str,
              call: Callable[[], Any]) -> bool:
        result = run_check(group, name, description, call)
        report.checks.append(result)
        self.run.say(f"{result.status:>7}  {group}: {name}"
                     + (f"\n{result.output}" if result.status == "failed" else ""))
        return result.status != "failed"

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = self.client.get(self.server.url + "/api/v1/system-info").json()
        return info

    def backend_state(self) -> dict[str, Any]:
        backends = self.info()["recipes"].get(self.recipe, {}).get("backends", {})
        if self.name not in backends:
            raise Refused(f"{self.options.backend} is not a backend of the installed plugins "
                          "(lemon backends lists them)")
        state: dict[str, Any] = backends[self.name]
        return state

    # Steps -------------------------------------------------------------------------

    def install(self) -> dict[str, str]:
        state = self.backend_state()
        if state["state"] == "installed":
            return {"state": "installed before validation", "version": state["version"]}
        if state["state"] != "installable":
            fix = f" (fix: {state['action']})" if state.get("action") else ""
            raise AssertionError(f"{self.options.backend} is {state['state']}: "
                                 f"{state['message']}{fix}")
        question = (f"{self.options.backend} is not installed; install it "
                    f"({state['tier']} tier)?")
        if not (self.options.yes or self.run.ask(question)):
            raise AssertionError(f"not installed, and no consent to install it: run "
                                 f"'lemon backends install {self.options.backend}' or "
                                 "validate with --yes")
        progress = self.run.progress(self.options.backend) if self.run.progress else None
        with self.client.stream("POST", self.server.url + "/api/v1/install", json={
                "backend": self.options.backend, "consent": True, "stream": True}) as answer:
            if answer.status_code != 200:
                answer.read()
                raise AssertionError(_error(answer))
            done = _events(answer, progress)
        self.installed_here = True
        state = self.backend_state()
        assert state["state"] == "installed", f"after the install it is {state['state']}: " \
                                              f"{state['message']}"
        return {"state": "installed by validation", "version": str(done.get("version", ""))}

    def model(self) -> dict[str, str]:
        card = self.client.get(f"{self.server.url}/v1/models/{self.options.model}")
        assert card.status_code == 200, _error(card)
        if card.json().get("downloaded"):
            return {"model": str(self.options.model), "state": "downloaded before validation"}
        size = card.json().get("size_bytes")
        about = f" ({size / 1e9:.2f} GB)" if size else ""
        if not (self.options.yes or self.run.ask(f"Download {self.options.model}{about}?")):
            raise AssertionError(f"{self.options.model} is not downloaded, and no consent to "
                                 f"download it: run 'lemon pull {self.options.model}' or "
                                 "validate with --yes")
        progress = self.run.progress(str(self.options.model)) if self.run.progress else None
        with self.client.stream("POST", self.server.url + "/api/v1/pull", json={
                "model_name": self.options.model, "stream": True}) as answer:
            if answer.status_code != 200:
                answer.read()
                raise AssertionError(_error(answer))
            _events(answer, progress)
        return {"model": str(self.options.model), "state": "downloaded by validation"}

    def loaded(self) -> dict[str, Any]:
        health = self.client.get(self.server.url + "/api/v1/health").json()
        entry = next((m for m in health["all_models_loaded"]
                      if m["model_name"] == self.options.model), None)
        assert entry is not None, f"{self.options.model} is not loaded"
        if entry.get("pid"):
            self.pids.add(int(entry["pid"]))
        argv = entry.get("launch_command") or []
        if argv and Path(argv[0]).name in {"podman", "docker"} and "--name" in argv:
            self.containers.add((argv[0], argv[argv.index("--name") + 1]))
        return dict(entry)

    def load(self) -> dict[str, str]:
        answer = self.client.post(self.server.url + "/api/v1/load", json={
            "model_name": self.options.model, "backend": self.name})
        if answer.status_code != 200:
            tail = "\n".join(self.engine_log()[-30:])
            raise AssertionError(f"{_error(answer)}\n-- the engine's last lines --\n{tail}")
        entry = self.loaded()
        return {"device": str(entry["device"]), "pid": str(entry.get("pid"))}

    def engine_log(self) -> list[str]:
        try:
            return FieldContext(self.server.url, self.client, str(self.options.model),
                                self.options.backend, {}, {},
                                self.server.log_file).engine_log()
        except (httpx.HTTPError, KeyError, ValueError):
            return []

    def benchmark(self, report: Report) -> dict[str, str]:
        """Warm runs of the short prompt (and, unless quick, the long one and a cold
        start), through :mod:`lemoncore.bench`'s measurements."""
        numbers = measure(self.client, self.server.url, Target(str(self.options.model),
                                                               self.name), self.options.quick)
        report.benchmark = numbers
        short = numbers["short"]
        return {"ttft_ms": str(short["ttft_ms"]["p50"]),
                "decode_tps": str(short["decode_tps"]["p50"]),
                "prompt_tps": str(numbers["long" if "long" in numbers else "short"][
                    "prompt_tps"]["p50"])}

    def uninstall(self) -> dict[str, str]:
        if not self.installed_here:
            raise CheckSkipped("the backend was installed before validation and is kept; "
                           f"to check install and uninstall, run 'lemon backends uninstall "
                           f"{self.options.backend}' and validate again")
        self.client.post(self.server.url + "/api/v1/unload",
                         json={"model_name": self.options.model})
        answer = self.client.post(self.server.url + "/api/v1/uninstall",
                                  json={"backend": self.options.backend})
        assert answer.status_code == 200, _error(answer)
        state = self.backend_state()["state"]
        assert state != "installed", "the backend is still installed after uninstall"
        return {"state": state}


def measure(client: httpx.Client, url: str, target: Target, quick: bool
            ) -> dict[str, Any]:
    """The benchmark: ``quick``, one warm run of the short prompt; else three of each
    scenario and one cold start (unload, load, first answer). Each run follows an
    unmeasured warm-up; each prompt has a unique prefix (no prompt cache helps)."""
    reps, max_tokens = (1, 32) if quick else (3, 64)
    scenarios = {"short": SCENARIOS["short"]} if quick else SCENARIOS
    select(client, url, target)
    found: dict[str, Any] = {"reps": reps, "max_tokens": max_tokens}
    for name, prompt in scenarios.items():
        samples = []
        for _ in range(reps):
            stream_once(client, url + "/v1", target.model, prompt, 4)
            samples.append(stream_once(client, url + "/v1", target.model, prompt, max_tokens))
        found[name] = _summary(samples)
    if (peak := peak_memory(client, url, target.model)) is not None:
        found["peak_memory_mib"] = round(peak / 2**20)
        found["peak_memory_note"] = "host memory of the engine; GPU memory is not counted"
    if not quick:
        client.post(url + "/api/v1/unload", json={"model_name": target.model})
        loading = select(client, url, target)
        cold = stream_once(client, url + "/v1", target.model, SCENARIOS["short"], max_tokens)
        found["cold_start_ttft_ms"] = round((loading + cold.ttft_s) * 1000, 1)
    assert found["short"]["decode_tps"]["p50"] > 0, "no tokens were streamed"
    return found


def _gone(pids: Iterable[int]) -> dict[str, str]:
    alive = [pid for pid in sorted(pids) if psutil.pid_exists(pid)]
    assert not alive, f"engine processes still running after the server stopped: {alive}"
    return {"engine pids": ", ".join(map(str, sorted(pids))) or "none"}


def _no_containers(containers: Iterable[tuple[str, str]]) -> dict[str, str]:
    left = []
    for tool, name in sorted(containers):
        out = subprocess.run([tool, "ps", "-a", "--filter", f"name=^{name}$", "--format",
                              "{{.ID}}"], capture_output=True, text=True, check=False)
        if out.stdout.strip():
            left.append(name)
    assert not left, f"containers left after the server stopped: {left}"
    return {"containers": ", ".join(n for _, n in sorted(containers)) or "none"}


def _versions(info: Mapping[str, Any]) -> dict[str, Any]:
    import platform

    return {"lemoncore": __version__, "server": info.get("version", ""),
            "python": platform.python_version(),
            "plugins": {p["name"]: {"version": p["version"], "distribution":
                                    p.get("distribution", ""), "status": p["status"]}
                        for p in info.get("plugins", [])}}


def _backend_info(options: Options, state: Mapping[str, Any], owner: str,
                  pin: Mapping[str, Any] | None, record: Mapping[str, Any] | None
                  ) -> dict[str, Any]:
    return {"name": options.backend, "owner plugin": owner, "tier": state.get("tier", ""),
            "format": state.get("format", ""), "state": state.get("state", ""),
            "version": state.get("version", ""), "pin": dict(pin) if pin else "none pinned",
            "installed": dict(record) if record else "no install record (installed "
                                                      "outside lemoncore's cache)"}


@dataclass
class PluginSide:
    """What the plugins loaded here say of the backend: its field checks, owner, lock
    pin and endpoints (chat and completions when they do not know the backend)."""

    checks: list[FieldCheck] = field(default_factory=list)
    owner: str = ""
    pin: dict[str, Any] | None = None
    endpoints: frozenset[str] = frozenset({"/v1/chat/completions", "/v1/completions"})


def _plugin_side(options: Options, run: Run) -> PluginSide:
    from lemoncore.core import build_core

    core = build_core(run.settings, run.plugins)
    recipe_name, _, name = options.backend.partition(":")
    recipe = core.plugins.registry.recipes.get(recipe_name)
    backend = recipe.backend(name) if recipe is not None else None
    if recipe is None or backend is None:
        return PluginSide()
    pin = core.backends.lock.backend_pin(recipe_name, name, core.backends.platform)
    pinned = None if pin is None else {"version": pin.version, "artifacts": [
        {"url": a.url, "sha256": a.sha256 or "UNVERIFIED", "provenance": a.provenance}
        for a in pin.artifacts]}
    return PluginSide(core.plugins.field_checks(recipe, backend),
                      core.plugins.owner(recipe, backend) or "", pinned,
                      frozenset(backend.endpoints))


def validate(options: Options, run: Run, log_file: Path) -> Report:
    """Validate ``options.backend`` on this machine; the report (never raises for a
    failing check: :class:`Refused` only when validation cannot start)."""
    if ":" not in options.backend:
        raise Refused(f"name the backend as RECIPE:BACKEND (e.g. llamacpp:vulkan), not "
                      f"{options.backend!r}")
    if other := running_elsewhere(run.settings.cache_dir):
        raise Refused(f"a lemon server runs from this cache ({other}); stop it first "
                      "('lemon stop'): validation starts its own server on the same "
                      "installs, and two servers on one cache remove each other's "
                      "containers")
    here = run.host or detect_host()
    side = _plugin_side(options, run)
    report = Report(options.backend, options.model or "",
                    datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                    options.quick, host_facts.describe(here))
    with serving(log_file, run.command) as server:
        v = _Validation(options, run, server)
        try:
            _steps(v, report, here, side)
        finally:
            v.client.close()
            code = stop(server)
    report.checks.append(run_check(
        "cleanup", "server stops cleanly", "the server exits 0 on SIGTERM, in time",
        lambda: _exit_status(code)))
    report.checks.append(run_check("cleanup", "no engine process left",
                                   "every engine process ended with the server",
                                   lambda: _gone(v.pids)))
    if v.containers:
        report.checks.append(run_check("cleanup", "no container left",
                                       "every container was removed with the server",
                                       lambda: _no_containers(v.containers)))
    return report


def _exit_status(code: int | None) -> dict[str, str]:
    assert code is not None, "the server did not stop within 30 s and was killed"
    assert code == 0, f"the server exited with status {code}"
    return {"exit status": "0"}


def _steps(v: _Validation, report: Report, here: HostInfo, side: PluginSide) -> None:
    info = v.info()
    report.versions = _versions(info)
    if why := host_facts.simulated(here, info):
        report.standin.append(why)
    state = v.backend_state()
    if not v.check(report, "install", "backend installed", "the backend is installed "
                   "(installed now, with consent, if it was not)", v.install):
        report.backend_info = _backend_info(v.options, state, side.owner, side.pin, None)
        return
    report.backend_info = _backend_info(v.options, v.backend_state(), side.owner, side.pin,
                                        install_record(v.run.settings.cache_dir,
                                                       v.options.backend))
    if not v.options.model:
        models = v.client.get(v.server.url + "/v1/models", params={"show_all": "true"})
        chosen = choose_model(models.json()["data"], v.recipe, v.name)
        if chosen is None:
            raise Refused(f"no catalogue chat model runs on {v.options.backend}; name one "
                          "with --model")
        v.options.model = report.model = str(chosen["id"])
    if not (v.check(report, "install", "model available", "the model is downloaded "
                    "(now, with consent, if it was not)", v.model)
            and v.check(report, "install", "model loads", "the model loads on this backend",
                        v.load)):
        return
    entry = v.loaded()
    context = FieldContext(v.server.url, v.client, str(v.options.model), v.options.backend,
                           entry, {"os": info.get("os"), "devices": info.get("devices")},
                           v.server.log_file)
    for check in side.checks:
        report.checks.append(run_field_check(check, context))
        v.run.say(f"{report.checks[-1].status:>7}  field: {check.name}")
    target = ConformanceTarget(v.server, str(v.options.model), v.options.backend,
                               stop_grace=v.run.settings.stop_grace,
                               plugins=dict(v.run.plugins or {}),
                               plugins_allow=v.run.settings.allowed_plugins)
    target.completions = "/v1/completions" in side.endpoints
    kit = BackendConformance()
    for name, description, method in field_checks():
        v.check(report, "conformance", name, description,
                lambda m=method: m(kit, target))  # type: ignore[misc]
    v.check(report, "benchmark", "benchmark", "TTFT, prompt and decode tokens/s, peak "
            "memory (lemoncore.bench)", lambda: v.benchmark(report))
    with_loaded = v.client.get(v.server.url + "/api/v1/health").json()["all_models_loaded"]
    for m in with_loaded:
        if m.get("pid"):
            v.pids.add(int(m["pid"]))
    v.check(report, "install", "uninstall", "uninstalling removes what validation "
            "installed", v.uninstall)



def _summary(samples: list[Sample]) -> dict[str, Any]:
    return {"ttft_ms": spread([s.ttft_s * 1000 for s in samples]),
            "decode_tps": spread([s.decode_tps for s in samples]),
            "prompt_tps": spread([s.prompt_tps for s in samples])}
