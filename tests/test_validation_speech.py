"""``lemon validate`` for a speech-only backend (``speechplugin.py``: the real
``espeak-ng`` behind ``/v1/audio/speech``): the kit's checks that apply to it, none of
the chat checks, every one passing and none skipped, its sample request from the
endpoint's declared body, and a benchmark in its own unit, the real-time factor."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytest

from lemoncore.cli.validate import add_validate, cmd_validate
from lemoncore.settings import Settings
from lemoncore.validation.endpointbench import NOT_WAV, wav_seconds
from lemoncore.validation.run import Run, choose_model

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from speechplugin import ESPEAK, MODEL, SCRIPT, speech_plugin


def args(*words: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_validate(parser.add_subparsers())
    return parser.parse_args(["validate", *words])


@pytest.mark.skipif(ESPEAK is None, reason="espeak-ng missing: apt-get install espeak-ng")
def test_validate_a_speech_only_backend_quick_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("LEMON_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    cache = tmp_path / ".cache/lemoncore"
    monkeypatch.setenv("LEMON_CACHE_DIR", str(cache))
    monkeypatch.setenv("LEMON_CONFIG_FILE", str(tmp_path / "config.toml"))
    run = Run(
        settings=Settings(plugins_allow=""),
        command=(str(SCRIPT),),
        plugins={"speech": speech_plugin(cache)},
    )
    out = tmp_path / "report"
    code = cmd_validate(args("speech:cpu", "--quick", "--json", "--out", str(out)), run)
    summary = json.loads(capsys.readouterr().out.strip())
    report = json.loads((out / "report.json").read_text())
    failed = [(c["name"], c["output"]) for c in report["checks"] if c["status"] == "failed"]
    assert code == 0 and not failed, failed
    assert summary["model"] == MODEL  # the backend's one speech model, chosen without --model
    kit = {c["name"]: c["status"] for c in report["checks"] if c["group"] == "conformance"}
    assert "chat_completion_shape_and_usage" not in kit
    assert set(kit.values()) == {"passed"}, kit  # none skipped
    assert {"every_endpoint_the_backend_serves_answers", "a_crashed_engine_is_loaded_again"} <= set(
        kit
    )
    bench = report["benchmark"]
    assert bench["endpoint"] == "/v1/audio/speech" and bench["kind"] == "speech"
    assert bench["realtime_factor"]["p50"] > 0 and bench["audio_seconds"]["p50"] > 0.5
    assert "## Benchmark" in (out / "report.md").read_text()


def test_wav_seconds_counts_the_frames_a_streamed_wav_holds() -> None:
    """espeak-ng's ``--stdout`` WAV has a placeholder length in its header: the seconds
    come from the frames read (here, one second of 16-bit mono at 22050 Hz)."""
    header = (
        b"RIFF\x24\xf0\xff\x7fWAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00"
        b"\x22\x56\x00\x00\x44\xac\x00\x00\x02\x00\x10\x00data\x00\xf0\xff\x7f"
    )
    assert wav_seconds(header + b"\x00\x00" * 22050) == 1.0
    assert wav_seconds(b"ID3 not a wav") is None
    assert "bytes per second" in NOT_WAV


def test_a_speech_backend_gets_its_smallest_speech_model() -> None:
    def card(name: str, kind: str, size: int) -> dict[str, object]:
        return {
            "id": name,
            "recipe": "speech",
            "backends": [{"name": "cpu"}],
            "size_bytes": size,
            "model_type": kind,
        }

    cards = [card("chat", "llm", 1), card("big", "speech", 9), card("small", "speech", 2)]
    assert choose_model(cards, "speech", "cpu", {"speech"}) == cards[2]
    assert choose_model(cards, "speech", "cpu", {"llm", "embedding"}) == cards[0]
