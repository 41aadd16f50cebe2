"""A speech-only backend (``speechplugin.py``: ``/v1/audio/speech`` served by the real
``espeak-ng``) passes :class:`BackendConformance` as it is: no check overridden, none
skipped (its bounded option and its engine's process give every check something to
check), and its answers are real WAV audio the stock ``openai`` SDK reads."""

from __future__ import annotations

import io
import sys
import wave
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from lemoncore.conformance import BackendConformance, ConformanceTarget
from lemoncore.testing import running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from speechplugin import ESPEAK, MODEL, SCRIPT, speech_plugin

pytestmark = pytest.mark.skipif(
    ESPEAK is None, reason="espeak-ng missing: apt-get install espeak-ng"
)


class TestSpeechConformance(BackendConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def conformance_target(
        cls, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[ConformanceTarget]:
        cache = tmp_path_factory.mktemp("speech")
        with running_server(cache, command=(str(SCRIPT),)) as server:
            yield ConformanceTarget(
                server,
                MODEL,
                "speech:cpu",
                plugins={"speech": speech_plugin(cache)},
                plugins_allow=[],
            )

    def test_the_openai_sdk_gets_real_wav_audio(
        self, conformance_target: ConformanceTarget
    ) -> None:
        """``client.audio.speech.create`` (openai's ``resources/audio/speech.py``,
        ``Speech.create``: POST /audio/speech with ``input``, ``model``, ``voice``)
        returns the engine's WAV: audio frames at espeak-ng's 22050 Hz."""
        client = openai.OpenAI(base_url=conformance_target.server.api, api_key="unused")
        spoken = client.audio.speech.create(model=MODEL, voice="alloy", input="Hello there.")
        with wave.open(io.BytesIO(spoken.read())) as audio:
            assert audio.getframerate() == 22050
            assert len(audio.readframes(audio.getnframes())) > 22050  # over half a second
