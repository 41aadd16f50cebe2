"""The orchestration of ``lemon validate``: the validation's own server on the user's
installs (:mod:`~lemoncore.validation.server`), then install, model, load
(:mod:`~lemoncore.validation.session`), the backend's field checks, the conformance
kit's checks that apply to what the backend declares (:func:`~.suite.field_checks`: the
chat checks only when it serves chat), a short benchmark per endpoint kind
(:mod:`~lemoncore.validation.benchmark`, :mod:`~.endpointbench`), uninstall (only what
it installed itself), shutdown and cleanup, each a check in the :class:`~.report.Report`,
with the versions and pins of :mod:`~lemoncore.validation.evidence`.

Decisions that need no process (the model to use, the pin to report, stand-in reasons)
are functions over data; :func:`validate` does the I/O. The entry point the CLI imports:
:func:`validate` with its :class:`Options`, :class:`Run` and :class:`Refused`.
"""

from __future__ import annotations

import datetime
import subprocess
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import psutil

from lemoncore.fieldchecks import FieldContext
from lemoncore.hosts import HostInfo, detect_host
from lemoncore.validation import host as host_facts
from lemoncore.validation.evidence import (
    PluginSide,
    backend_info,
    install_record,
    plugin_side,
    versions,
)
from lemoncore.validation.kit import run_check, run_field_check
from lemoncore.validation.options import Options, Refused, Run
from lemoncore.validation.report import Report
from lemoncore.validation.server import running_elsewhere, serving, stop
from lemoncore.validation.session import Validation, secrets
from lemoncore.validation.suite import field_checks, kit_class
from lemoncore.validation.target import ConformanceTarget

__all__ = ["Options", "Refused", "Run", "choose_model", "secrets", "validate"]
NON_CHAT = {"embeddings", "embedding", "reranking", "transcription", "image", "tts"}


def choose_model(
    models: Iterable[Mapping[str, Any]],
    recipe: str,
    backend: str,
    types: Collection[str] = ("llm",),
) -> Mapping[str, Any] | None:
    """The smallest model of ``recipe`` that ``backend`` serves (``/v1/models`` cards)
    of one of ``types`` (the model types its endpoints serve; a chat model, ``llm``, when
    it serves chat): by published size, then already downloaded first, then by name."""
    wanted = {"llm"} if "llm" in types else set(types)
    fits = [
        m
        for m in models
        if m.get("recipe") == recipe
        and backend in {b.get("name") for b in m.get("backends", [])}
        and (m.get("recipe_options") or {}).get("backend") in {None, backend}
        and _type(m) in wanted
    ]
    return min(
        fits,
        key=lambda m: (m.get("size_bytes") or float("inf"), not m.get("downloaded"), str(m["id"])),
        default=None,
    )


def _type(card: Mapping[str, Any]) -> str:
    """A card's ``model_type``; a card without one (an older server's) is a chat model unless
    its labels say otherwise."""
    if kind := card.get("model_type") or card.get("type"):
        return str(kind)
    return "other" if NON_CHAT & set(card.get("labels") or ()) else "llm"


def _gone(pids: Iterable[int]) -> dict[str, str]:
    alive = [pid for pid in sorted(pids) if psutil.pid_exists(pid)]
    assert not alive, f"engine processes still running after the server stopped: {alive}"
    return {"engine pids": ", ".join(map(str, sorted(pids))) or "none"}


def _no_containers(containers: Iterable[tuple[str, str]]) -> dict[str, str]:
    left = []
    for tool, name in sorted(containers):
        out = subprocess.run(
            [tool, "ps", "-a", "--filter", f"name=^{name}$", "--format", "{{.ID}}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.stdout.strip():
            left.append(name)
    assert not left, f"containers left after the server stopped: {left}"
    return {"containers": ", ".join(n for _, n in sorted(containers)) or "none"}


def validate(options: Options, run: Run, log_file: Path) -> Report:
    """Validate ``options.backend`` on this machine; the report (never raises for a
    failing check: :class:`Refused` only when validation cannot start)."""
    if ":" not in options.backend:
        raise Refused(
            f"name the backend as RECIPE:BACKEND (e.g. llamacpp:vulkan), not {options.backend!r}"
        )
    if other := running_elsewhere(run.settings.cache_dir):
        raise Refused(
            f"a lemon server runs from this cache ({other}); stop it first "
            "('lemon stop'): validation starts its own server on the same "
            "installs, and two servers on one cache remove each other's "
            "containers"
        )
    here = run.host or detect_host()
    side = plugin_side(options, run)
    report = Report(
        options.backend,
        options.model or "",
        datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        options.quick,
        host_facts.describe(here),
    )
    with serving(log_file, run.command) as server:
        v = Validation(options, run, server)
        try:
            _steps(v, report, here, side)
        finally:
            v.client.close()
            code = stop(server)
    report.checks.append(
        run_check(
            "cleanup",
            "server stops cleanly",
            "the server exits 0 on SIGTERM, in time",
            lambda: _exit_status(code),
        )
    )
    report.checks.append(
        run_check(
            "cleanup",
            "no engine process left",
            "every engine process ended with the server",
            lambda: _gone(v.pids),
        )
    )
    if v.containers:
        report.checks.append(
            run_check(
                "cleanup",
                "no container left",
                "every container was removed with the server",
                lambda: _no_containers(v.containers),
            )
        )
    return report


def _exit_status(code: int | None) -> dict[str, str]:
    assert code is not None, "the server did not stop within 30 s and was killed"
    assert code == 0, f"the server exited with status {code}"
    return {"exit status": "0"}


def _steps(v: Validation, report: Report, here: HostInfo, side: PluginSide) -> None:
    info = v.info()
    report.versions = versions(info)
    if why := host_facts.simulated(here, info):
        report.standin.append(why)
    state = v.backend_state()
    if not v.check(
        report,
        "install",
        "backend installed",
        "the backend is installed (installed now, with consent, if it was not)",
        v.install,
    ):
        report.backend_info = backend_info(v.options, state, side.owner, side.pin, None)
        return
    report.backend_info = backend_info(
        v.options,
        v.backend_state(),
        side.owner,
        side.pin,
        install_record(v.run.settings.cache_dir, v.options.backend),
    )
    if not v.options.model:
        models = v.client.get(v.server.url + "/v1/models", params={"show_all": "true"})
        chosen = choose_model(models.json()["data"], v.recipe, v.name, side.model_types)
        if chosen is None:
            kinds = " or ".join(sorted(side.model_types)) or "chat"
            raise Refused(
                f"no catalogue {kinds} model runs on {v.options.backend}; name one with --model"
            )
        v.options.model = report.model = str(chosen["id"])
    if not (
        v.check(
            report,
            "install",
            "model available",
            "the model is downloaded (now, with consent, if it was not)",
            v.model,
        )
        and v.check(report, "install", "model loads", "the model loads on this backend", v.load)
    ):
        return
    entry = v.loaded()
    context = FieldContext(
        v.server.url,
        v.client,
        str(v.options.model),
        v.options.backend,
        entry,
        {"os": info.get("os"), "devices": info.get("devices")},
        v.server.log_file,
    )
    for check in side.checks:
        report.checks.append(run_field_check(check, context))
        v.run.say(f"{report.checks[-1].status:>7}  field: {check.name}")
    target = ConformanceTarget(
        v.server,
        str(v.options.model),
        v.options.backend,
        stop_grace=v.run.settings.stop_grace,
        plugins=dict(v.run.plugins or {}),
        plugins_allow=v.run.settings.allowed_plugins,
    )
    target.completions = "/v1/completions" in side.endpoints
    kit = kit_class(side.endpoints)()
    for name, description, method in field_checks(side.endpoints):
        v.check(report, "conformance", name, description, lambda m=method: m(kit, target))  # type: ignore[misc]
    v.check(
        report,
        "benchmark",
        "benchmark",
        "per endpoint kind: chat TTFT and tokens/s (lemoncore.bench), speech real-time "
        "factor, transcription audio seconds per second, else requests/s; peak memory",
        lambda: v.benchmark(report, target),
    )
    with_loaded = v.client.get(v.server.url + "/api/v1/health").json()["all_models_loaded"]
    for m in with_loaded:
        if m.get("pid"):
            v.pids.add(int(m["pid"]))
    v.check(
        report,
        "install",
        "uninstall",
        "uninstalling removes what validation installed",
        v.uninstall,
    )
