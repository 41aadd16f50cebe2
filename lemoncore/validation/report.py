"""The validation report: plain data (its parts' shapes in :mod:`~.facts`), rendered as
JSON and markdown, with the home directory and secrets redacted, and read back (``lemon
tiers --evidence``).

The format is documented in ``docs/validation.md``; :data:`FORMAT` names its version.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TypedDict

from lemoncore.validation.facts import BackendFacts, Benchmark, HostFacts, Versions

FORMAT = "lemoncore-validation/1"
GROUPS = ("install", "conformance", "field", "benchmark", "cleanup")
# Secrets that may appear in output: keys given on a command line or in an environment,
# bearer tokens, Hugging Face tokens.
_SECRETS = (
    re.compile(
        r"(?i)((?:api[_-]?key|token|secret|password)[\"']?\s*[=:]\s*[\"']?)"
        r"[^\s\"',]+"
    ),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/-]+=*"),
    re.compile(r"()\bhf_[A-Za-z0-9]{20,}"),
)


@dataclass
class CheckResult:
    """One check: ``status`` is ``passed``, ``failed`` or ``skipped``; ``output`` is what
    went wrong (or why it was skipped); ``standin`` says why what it saw was not the real
    engine or hardware ("" when it was)."""

    group: str
    name: str
    description: str
    status: str
    seconds: float = 0.0
    output: str = ""
    facts: dict[str, str] = field(default_factory=dict)
    standin: str = ""


class CheckData(TypedDict):
    """A :class:`CheckResult` in the report's JSON."""

    group: str
    name: str
    description: str
    status: str
    seconds: float
    output: str
    facts: dict[str, str]
    standin: str


class Counts(TypedDict):
    passed: int
    failed: int
    skipped: int


class ReportData(TypedDict):
    """The report as ``report.json`` holds it (``docs/validation.md``)."""

    format: str
    result: str  # passed, failed
    hardware_evidence: bool
    summary: Counts
    backend: str
    model: str
    created: str
    quick: bool
    host: HostFacts
    versions: Versions
    backend_info: BackendFacts
    checks: list[CheckData]
    benchmark: Benchmark
    standin: list[str]


class Summary(TypedDict):
    """The ``--json`` line of ``lemon validate``."""

    result: str
    backend: str
    model: str
    passed: int
    failed: int
    skipped: int
    standin: bool
    hardware_evidence: bool
    report: str


@dataclass
class Report:
    backend: str
    model: str
    created: str
    quick: bool = False
    host: HostFacts = field(default_factory=HostFacts)
    versions: Versions = field(default_factory=Versions)
    backend_info: BackendFacts = field(default_factory=BackendFacts)
    checks: list[CheckResult] = field(default_factory=list)
    benchmark: Benchmark = field(default_factory=Benchmark)
    standin: list[str] = field(default_factory=list)  # why the run was not real hardware

    @property
    def counts(self) -> dict[str, int]:
        found = {"passed": 0, "failed": 0, "skipped": 0}
        for check in self.checks:
            found[check.status] = found.get(check.status, 0) + 1
        return found

    @property
    def passed(self) -> bool:
        return bool(self.checks) and self.counts["failed"] == 0

    @property
    def standins(self) -> list[str]:
        """Every reason the run, or one of its checks, was not the real thing."""
        return [*self.standin, *(f"{c.name}: {c.standin}" for c in self.checks if c.standin)]

    @property
    def hardware_evidence(self) -> bool:
        """Whether the report may count as evidence: every check passed, none on a
        stand-in."""
        return self.passed and not self.standins

    def as_dict(self) -> ReportData:
        data = asdict(self)  # a deep copy
        counts = self.counts
        return {
            "format": FORMAT,
            "result": "passed" if self.passed else "failed",
            "hardware_evidence": self.hardware_evidence,
            "summary": {
                "passed": counts["passed"],
                "failed": counts["failed"],
                "skipped": counts["skipped"],
            },
            "backend": self.backend,
            "model": self.model,
            "created": self.created,
            "quick": self.quick,
            "host": data["host"],
            "versions": data["versions"],
            "backend_info": data["backend_info"],
            "checks": data["checks"],
            "benchmark": data["benchmark"],
            "standin": self.standins,
        }

    def summary(self, path: str = "") -> Summary:
        """The one ``--json`` line for scripts."""
        counts = self.counts
        return {
            "result": "passed" if self.passed else "failed",
            "backend": self.backend,
            "model": self.model,
            "passed": counts["passed"],
            "failed": counts["failed"],
            "skipped": counts["skipped"],
            "standin": bool(self.standins),
            "hardware_evidence": self.hardware_evidence,
            "report": path,
        }


def redact(text: str, home: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the home directory as ``~``, the given secret values and anything
    shaped like a key or token replaced by ``<redacted>``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "<redacted>")
    for pattern in _SECRETS:
        text = pattern.sub(lambda m: m.group(1) + "<redacted>", text)
    if home and home not in {"/", ""}:
        text = text.replace(home.rstrip("/\\"), "~")
    return text


def to_json(report: Report, home: str, secrets: Iterable[str] = ()) -> str:
    """The report as JSON, each string redacted before it is encoded (JSON escapes a
    Windows home's backslashes)."""
    kept = list(secrets)

    def clean(value: object) -> object:
        if isinstance(value, str):
            return redact(value, home, kept)
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    return json.dumps(clean(report.as_dict()), indent=2)


def to_markdown(report: Report, home: str, secrets: Iterable[str] = ()) -> str:
    """The report as markdown, redacted: a verdict, the host, the versions, every check
    by group (with its output when it failed or was skipped) and the benchmark."""
    data = report.as_dict()
    verdict = "PASSED" if report.passed else "FAILED"
    lines = [
        f"# lemon validate {report.backend}: {verdict}",
        "",
        f"Model `{report.model}`, {report.created}"
        f"{' (quick)' if report.quick else ''}: {_counts(report.counts)}.",
        "",
    ]
    if report.standins:
        lines += [
            "**Ran against a stand-in: not hardware evidence.**",
            "",
            *(f"- {why}" for why in report.standins),
            "",
        ]
    elif report.passed:
        lines += ["Every check passed on real hardware: this report is hardware evidence.", ""]
    lines += [
        "## Host",
        "",
        *_table(_flat(data["host"])),
        "",
        "## Versions",
        "",
        *_table(_flat(data["versions"])),
        "",
        "## Backend",
        "",
        *_table(_flat(data["backend_info"])),
        "",
    ]
    for group in GROUPS:
        checks = [c for c in report.checks if c.group == group]
        if not checks:
            continue
        lines += [
            f"## Checks: {group}",
            "",
            "| check | result | seconds | facts |",
            "|---|---|---|---|",
        ]
        for c in checks:
            facts = "; ".join(f"{k}: {v}" for k, v in c.facts.items())
            mark = c.status.upper() if c.status == "failed" else c.status
            if c.standin:
                mark += " (stand-in)"
            lines.append(f"| {c.name} | {mark} | {c.seconds:.2f} | {_cell(facts)} |")
        for c in checks:
            if c.output and c.status != "passed":
                lines += ["", f"### {c.name}: {c.status}", "", "```", c.output.rstrip(), "```"]
        lines.append("")
    lines += ["## Benchmark", ""]
    lines += _table(_flat(data["benchmark"])) if report.benchmark else ["Not run."]
    return redact("\n".join(lines) + "\n", home, secrets)


def from_json(text: str) -> dict[str, object]:
    """A report read back, as JSON: it may come from another version, so nothing but its
    format is checked (``lemoncore.tiers.evidence_from_report`` reads it); ``ValueError``
    when it is not one."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a lemon validate report (format {FORMAT})")
    return data


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in counts.items())


def _flat(data: object, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(data, Mapping):
        return [row for k, v in data.items() for row in _flat(v, f"{prefix}{k}.")]
    if isinstance(data, list) and any(isinstance(v, Mapping | list) for v in data):
        return [row for i, v in enumerate(data) for row in _flat(v, f"{prefix}{i}.")]
    value = ", ".join(map(str, data)) if isinstance(data, list) else str(data)
    return [(prefix.rstrip("."), value)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(rows: list[tuple[str, str]]) -> list[str]:
    return ["| | |", "|---|---|", *(f"| {k} | {_cell(v)} |" for k, v in rows)]
