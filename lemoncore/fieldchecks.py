"""Field checks: what a plugin declares (``register_field_checks``) for ``lemon validate``
to check on real hardware, beyond the conformance kit: the device an engine ended up on,
the container it runs in, the build it reports.

A :class:`FieldCheck` is a name, a one-line description and a function. The function runs
in the validating process, after the model has answered, with a :class:`FieldContext`
(the validation's server, the loaded model's entry of ``/api/v1/health``, the engine's
log lines); it returns a :class:`FieldResult` (facts for the report, and whether what it
saw was a stand-in), raises ``AssertionError`` (or any exception) with what was wrong to
fail, or raises :class:`CheckSkipped` when it does not apply here. This module is kept
light: plugins import it when they load, so httpx is imported only for type checking.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx


class CheckSkipped(Exception):
    """Raised by a check that does not apply here; the message says why."""


@dataclass(frozen=True)
class FieldResult:
    """What a check saw: ``facts`` for the report (``{"device": "AMD Radeon RX 7600"}``)
    and ``standin``: why what it checked was not the real engine or hardware ("" when it
    was). A stand-in's result never counts as hardware evidence."""

    facts: Mapping[str, str] = field(default_factory=dict)
    standin: str = ""


@dataclass
class FieldContext:
    """The served model a check looks at. ``client`` talks to the validation's server
    (``url``) with the admin key when one is configured; ``loaded`` is the model's entry in
    ``/api/v1/health`` (``pid``, ``launch_command``, ``backend_url``, ``device``);
    ``host`` is ``/api/v1/system-info``'s ``os`` and ``devices``."""

    url: str
    client: httpx.Client
    model: str
    backend: str  # recipe:backend
    loaded: Mapping[str, Any]
    host: Mapping[str, Any] = field(default_factory=dict)
    log_file: Path | None = None  # the server's output, where its log API keeps no copy

    def engine_log(self, limit: int = 2000) -> list[str]:
        """The engine's recent output lines, oldest first: ``/api/v1/logs`` (the model's
        backend lines), else the server's output lines about the model's backend."""
        answer = self.client.get(
            self.url + "/api/v1/logs", params={"model": self.model, "limit": limit}
        )
        answer.raise_for_status()
        lines = [
            str(line["fields"].get("line", line["event"]))
            for line in answer.json()["data"]
            if line.get("source") == "backend"
        ]
        if lines or self.log_file is None or not self.log_file.exists():
            return lines
        mark = f"model={self.model} source=backend"
        return [
            line for line in self.log_file.read_text(errors="replace").splitlines() if mark in line
        ][-limit:]


@dataclass(frozen=True)
class FieldCheck:
    """A named check with a description and a function. ``backends`` names the
    ``recipe:backend`` pairs it applies to (empty: every backend the declaring plugin
    owns); a plugin's checks are run only for backends it owns."""

    name: str
    description: str
    function: Callable[[FieldContext], FieldResult | None]
    backends: tuple[str, ...] = ()

    def applies_to(self, backend: str) -> bool:
        return not self.backends or backend in self.backends
