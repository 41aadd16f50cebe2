"""The steps of a validation against its server, each one a check's function: install
(with consent), model download (with consent), load, the benchmark, uninstall (only what
validation installed itself), and what they leave to clean up (engine pids, containers).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from lemoncore.api.replies import (
    BackendInstallResult,
    Health,
    LoadedModel,
    ModelCard,
    Progress,
    PullResult,
    StreamError,
)
from lemoncore.api.system_info import BackendInfo, SystemInfo
from lemoncore.bench import Target
from lemoncore.fieldchecks import CheckSkipped, FieldContext
from lemoncore.settings import Settings
from lemoncore.validation.benchmark import measure
from lemoncore.validation.declared import declared, request
from lemoncore.validation.endpointbench import headline, measure_endpoint
from lemoncore.validation.kit import run_check
from lemoncore.validation.options import Options, Refused, Run
from lemoncore.validation.report import Report
from lemoncore.validation.server import ServerProcess
from lemoncore.validation.target import ConformanceTarget

Result = TypeVar("Result", bound=BaseModel)


def _headers(settings: Settings) -> dict[str, str]:
    key = settings.admin_api_key or settings.api_key
    return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}


def secrets(settings: Settings) -> list[str]:
    """The configured API keys, which the report and the kept server log redact."""
    return [k.get_secret_value() for k in (settings.api_key, settings.admin_api_key) if k]


def _events(
    response: httpx.Response, progress: Callable[[int, int], None] | None, result: type[Result]
) -> Result:
    """Read an install or pull SSE stream; the ``complete`` data as ``result``, or raise
    with the ``error``."""
    event = ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
            if event == "progress" and progress is not None:
                tick = Progress.model_validate_json(data)
                progress(tick.bytes_downloaded, tick.bytes_total)
            elif event == "error":
                raise RuntimeError(StreamError.model_validate_json(data).error)
            elif event == "complete":
                return result.model_validate_json(data)
    raise RuntimeError("the stream ended without a result")


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:500]


class Validation:
    """One validation's client of its server, with what it saw started (engine pids,
    containers) and whether it installed the backend itself."""

    def __init__(self, options: Options, run: Run, server: ServerProcess) -> None:
        self.options, self.run, self.server = options, run, server
        self.recipe, _, self.name = options.backend.partition(":")
        self.client = httpx.Client(timeout=600, headers=_headers(run.settings))
        self.pids: set[int] = set()
        self.containers: set[tuple[str, str]] = set()  # (tool, name)
        self.installed_here = False

    def check(
        self, report: Report, group: str, name: str, description: str, call: Callable[[], Any]
    ) -> bool:
        result = run_check(group, name, description, call)
        report.checks.append(result)
        self.run.say(
            f"{result.status:>7}  {group}: {name}"
            + (f"\n{result.output}" if result.status == "failed" else "")
        )
        return result.status != "failed"

    def info(self) -> dict[str, object]:
        """``/api/v1/system-info``'s reply as JSON, for :func:`~.evidence.versions`,
        :func:`~.host.simulated` and a field check's ``host``."""
        info: dict[str, object] = self.client.get(self.server.url + "/api/v1/system-info").json()
        return info

    def backend_state(self) -> BackendInfo:
        recipe = SystemInfo.model_validate(self.info()).recipes.get(self.recipe)
        state = recipe.backends.get(self.name) if recipe is not None else None
        if state is None:
            raise Refused(
                f"{self.options.backend} is not a backend of the installed plugins "
                "(lemon backends lists them)"
            )
        return state

    # Steps -------------------------------------------------------------------------

    def install(self) -> dict[str, str]:
        state = self.backend_state()
        if state.state == "installed":
            return {"state": "installed before validation", "version": state.version}
        if state.state != "installable":
            fix = f" (fix: {state.action})" if state.action else ""
            raise AssertionError(f"{self.options.backend} is {state.state}: {state.message}{fix}")
        question = f"{self.options.backend} is not installed; install it ({state.tier} tier)?"
        if not (self.options.yes or self.run.ask(question)):
            raise AssertionError(
                f"not installed, and no consent to install it: run "
                f"'lemon backends install {self.options.backend}' or "
                "validate with --yes"
            )
        progress = self.run.progress(self.options.backend) if self.run.progress else None
        with self.client.stream(
            "POST",
            self.server.url + "/api/v1/install",
            json={"backend": self.options.backend, "consent": True, "stream": True},
        ) as answer:
            if answer.status_code != 200:
                answer.read()
                raise AssertionError(_error(answer))
            done = _events(answer, progress, BackendInstallResult)
        self.installed_here = True
        state = self.backend_state()
        assert state.state == "installed", f"after the install it is {state.state}: {state.message}"
        return {"state": "installed by validation", "version": done.version}

    def model(self) -> dict[str, str]:
        answer = self.client.get(f"{self.server.url}/v1/models/{self.options.model}")
        assert answer.status_code == 200, _error(answer)
        card = ModelCard.model_validate_json(answer.content)
        if card.downloaded:
            return {"model": str(self.options.model), "state": "downloaded before validation"}
        size = card.size_bytes
        about = f" ({size / 1e9:.2f} GB)" if size else ""
        if not (self.options.yes or self.run.ask(f"Download {self.options.model}{about}?")):
            raise AssertionError(
                f"{self.options.model} is not downloaded, and no consent to "
                f"download it: run 'lemon pull {self.options.model}' or "
                "validate with --yes"
            )
        progress = self.run.progress(str(self.options.model)) if self.run.progress else None
        with self.client.stream(
            "POST",
            self.server.url + "/api/v1/pull",
            json={"model_name": self.options.model, "stream": True},
        ) as answer:
            if answer.status_code != 200:
                answer.read()
                raise AssertionError(_error(answer))
            _events(answer, progress, PullResult)
        return {"model": str(self.options.model), "state": "downloaded by validation"}

    def entry(self) -> LoadedModel:
        """The model's ``/api/v1/health`` entry; its engine pid and container are noted
        for the cleanup checks."""
        health = Health.model_validate_json(
            self.client.get(self.server.url + "/api/v1/health").content
        )
        entry = next(
            (m for m in health.all_models_loaded if m.model_name == self.options.model), None
        )
        assert entry is not None, f"{self.options.model} is not loaded"
        if entry.pid:
            self.pids.add(entry.pid)
        argv = entry.launch_command
        if argv and Path(argv[0]).name in {"podman", "docker"} and "--name" in argv:
            self.containers.add((argv[0], argv[argv.index("--name") + 1]))
        return entry

    def loaded(self) -> dict[str, object]:
        """:meth:`entry` as the JSON a field check gets (``FieldContext.loaded``)."""
        return self.entry().model_dump(mode="json")

    def load(self) -> dict[str, str]:
        answer = self.client.post(
            self.server.url + "/api/v1/load",
            json={"model_name": self.options.model, "backend": self.name},
        )
        if answer.status_code != 200:
            tail = "\n".join(self.engine_log()[-30:])
            raise AssertionError(f"{_error(answer)}\n-- the engine's last lines --\n{tail}")
        entry = self.entry()
        return {"device": entry.device.value, "pid": str(entry.pid)}

    def engine_log(self) -> list[str]:
        try:
            return FieldContext(
                self.server.url,
                self.client,
                str(self.options.model),
                self.options.backend,
                {},
                {},
                self.server.log_file,
            ).engine_log()
        except (httpx.HTTPError, KeyError, ValueError):
            return []

    def benchmark(self, report: Report, target: ConformanceTarget) -> dict[str, str]:
        """Per endpoint kind: a chat backend's warm runs of the short prompt (and, unless
        quick, the long one and a cold start, :mod:`lemoncore.bench`'s measurements);
        another's through the endpoint the kit's lifecycle checks use
        (:mod:`~.endpointbench`)."""
        found = declared(target)
        if not found.chat:
            endpoint = found.primary(target)
            numbers = measure_endpoint(
                self.client,
                self.server.url,
                str(self.options.model),
                endpoint,
                request(target, endpoint),
                self.options.quick,
            )
            report.benchmark = numbers
            return headline(numbers)
        numbers = measure(
            self.client,
            self.server.url,
            Target(str(self.options.model), self.name),
            self.options.quick,
        )
        report.benchmark = numbers
        short = numbers["short"]
        return {
            "ttft_ms": str(short["ttft_ms"]["p50"]),
            "decode_tps": str(short["decode_tps"]["p50"]),
            "prompt_tps": str(numbers.get("long", short)["prompt_tps"]["p50"]),
        }

    def uninstall(self) -> dict[str, str]:
        if not self.installed_here:
            raise CheckSkipped(
                "the backend was installed before validation and is kept; "
                f"to check install and uninstall, run 'lemon backends uninstall "
                f"{self.options.backend}' and validate again"
            )
        self.client.post(
            self.server.url + "/api/v1/unload", json={"model_name": self.options.model}
        )
        answer = self.client.post(
            self.server.url + "/api/v1/uninstall", json={"backend": self.options.backend}
        )
        assert answer.status_code == 200, _error(answer)
        state = self.backend_state().state
        assert state != "installed", "the backend is still installed after uninstall"
        return {"state": state.value}
