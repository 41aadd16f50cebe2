"""The engine and espeak-ng alone, without lemoncore: what espeak-ng's own failures
become (the real program, given what it refuses)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lemoncore.plugin import free_port

import lemon_plugin_espeak
from lemon_plugin_espeak.espeak import SynthesisError, synthesize

PROGRAM = Path(shutil.which("espeak-ng") or "espeak-ng")
VOICES = Path(lemon_plugin_espeak.__file__).parent / "voices" / "en.json"


def test_an_espeak_failure_says_what_espeak_said() -> None:
    with pytest.raises(SynthesisError, match=r"status 1: .*voice does not exist"):
        synthesize(PROGRAM, "nosuch", 175, "Hello.", timeout=30)


def _engine(*extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "lemon_plugin_espeak.engine", "--model", str(VOICES), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.fixture
def slow_engine() -> Iterator[str]:
    """An engine whose syntheses may take only a millisecond."""
    port = free_port()
    proc = _engine("--alias", "espeak-en", "--port", str(port), "--timeout", "0.001")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        assert proc.wait(10) == 0, "the engine exits 0 on SIGTERM"


def test_a_synthesis_past_its_time_is_a_500_in_openais_shape(slow_engine: str) -> None:
    text = "A sentence long enough that espeak-ng cannot speak it in a millisecond. " * 20
    answer = httpx.post(slow_engine + "/v1/audio/speech", json={"input": text, "voice": "alloy"})
    assert answer.status_code == 500, answer.text
    assert answer.json()["error"]["type"] == "server_error"
    assert "took longer than 0.001 s" in answer.json()["error"]["message"]


def test_a_voice_file_espeak_cannot_speak_stops_the_engine_with_why(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"voice": "xx-nowhere"}')
    argv = ["--model", str(bad), "--alias", "x", "--port", str(free_port())]
    proc = subprocess.run(
        [sys.executable, "-m", "lemon_plugin_espeak.engine", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "no voice 'xx-nowhere'" in proc.stderr
