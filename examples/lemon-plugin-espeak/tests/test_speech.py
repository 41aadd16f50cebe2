"""OpenAI's text-to-speech API with the stock openai SDK, as its docs use it
(``client.audio.speech.create``, ``with_streaming_response``), through a real ``lemon
serve`` and the real espeak-ng: WAV and PCM as espeak-ng writes them, the speed and the
voice honoured, bad requests refused in OpenAI's shape, and a chat request for the speech
model refused without loading it."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from lemoncore.plugin import ServerProcess, running_server

MODEL = "espeak-en"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"LEMON_PLUGINS_ALLOW": "espeak"}
    with running_server(tmp_path_factory.mktemp("speech"), env) as s:
        yield s


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api, api_key="none", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def espeak_rate() -> int:
    """The sample rate espeak-ng writes, as its own WAV header says."""
    program = shutil.which("espeak-ng")
    assert program, "espeak-ng is not installed: apt install espeak-ng"
    out = subprocess.run([program, "--stdout", "hi"], capture_output=True, check=True).stdout
    return int.from_bytes(out[24:28], "little")  # the fmt chunk's sample rate


def _wav(data: bytes) -> wave.Wave_read:
    return wave.open(io.BytesIO(data), "rb")


def speak(client: openai.OpenAI, text: str, **extra: object) -> bytes:
    args: dict[str, object] = {"voice": "alloy", "response_format": "wav", **extra}
    return client.audio.speech.create(model=MODEL, input=text, **args).content  # type: ignore[arg-type]


def test_a_wav_is_mono_16_bit_at_espeaks_rate_and_grows_with_the_text(
    client: openai.OpenAI, espeak_rate: int
) -> None:
    short = speak(client, "Hello.")
    long = speak(client, "Hello. This sentence is a good deal longer than the first one.")
    for data in (short, long):
        with _wav(data) as w:
            assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, espeak_rate)
            # The header is true: its frame count is the data that follows it.
            assert w.getnframes() * 2 == len(data) - 44
    with _wav(short) as a, _wav(long) as b:
        assert 0.2 < a.getnframes() / espeak_rate < b.getnframes() / espeak_rate < 10


def test_pcm_is_the_wavs_samples(client: openai.OpenAI) -> None:
    pcm = speak(client, "Hello there.", response_format="pcm")
    with _wav(speak(client, "Hello there.")) as w:
        assert pcm == w.readframes(w.getnframes())


def test_speed_and_voice_change_the_audio(client: openai.OpenAI) -> None:
    with _wav(speak(client, "Counting one two three four five.")) as normal:
        frames = normal.getnframes()
    with _wav(speak(client, "Counting one two three four five.", speed=2.0)) as fast:
        assert fast.getnframes() < frames * 0.75
    assert speak(client, "Hello.", voice="echo") != speak(client, "Hello.", voice="alloy")
    assert speak(client, "Bonjour.", voice="fr-fr")  # an espeak-ng voice by its name


def test_the_streaming_response_writes_the_file(client: openai.OpenAI, tmp_path: Path) -> None:
    target = tmp_path / "hello.wav"
    with client.audio.speech.with_streaming_response.create(
        model=MODEL, voice="alloy", input="Hello, streaming.", response_format="wav"
    ) as response:
        assert response.headers["content-type"].startswith("audio/wav")
        response.stream_to_file(target)
    with wave.open(str(target), "rb") as w:
        assert w.getnchannels() == 1 and w.getnframes() > 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"response_format": "mp3"}, "response_format"),
        ({"voice": "no-such-voice"}, "voice"),
        ({"text": ""}, "input"),
        ({"text": "a" * 4097}, "input"),
        ({"speed": 0.1}, "speed"),
    ],
    ids=["mp3", "unknown-voice", "empty-input", "long-input", "slow"],
)
def test_what_espeak_cannot_do_is_a_400_naming_the_field(
    client: openai.OpenAI, change: dict[str, object], field: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        speak(client, **{"text": "Hello.", **change})  # type: ignore[arg-type]
    assert refused.value.param == field and field in refused.value.message, refused.value.body
    if field == "response_format":  # and what is supported
        assert "wav" in refused.value.message and "pcm" in refused.value.message


def test_a_chat_request_for_the_speech_model_is_refused_with_nothing_loaded(
    server: ServerProcess,
) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.post("/api/v1/unload", json={}).status_code == 200
        answer = http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]},
        )
        assert answer.status_code == 400, answer.text
        assert MODEL in answer.json()["error"]["message"]
        assert http.get("/api/v1/health").json()["all_models_loaded"] == []
        assert answer.json()["error"]["code"] == "model_type_mismatch", answer.text
