"""The validation's benchmark for a backend without chat, per endpoint kind: speech
(``/v1/audio/speech``, a ``speech`` model): the real-time factor, seconds of audio
produced per wall second; transcription (a ``transcription`` model): seconds of the
uploaded audio transcribed per wall second; any other endpoint: requests per second.
Each measured request follows an unmeasured warm-up, with the endpoint's sample
request (:func:`~.declared.sample`). Audio is read as WAV (the stdlib's ``wave``); an
answer that is not WAV is measured in bytes per second, and the report says so."""

from __future__ import annotations

import io
import time
import wave
from collections.abc import Mapping

import httpx

from lemoncore.bench import peak_memory, spread
from lemoncore.recipes import Endpoint, ModelType
from lemoncore.validation.answers import expect
from lemoncore.validation.facts import Benchmark
from lemoncore.validation.target import Sample

NOT_WAV = "the answers are not WAV audio: measured in bytes per second"


def wav_seconds(data: bytes) -> float | None:
    """The seconds of audio in a WAV file's bytes (``None``: not WAV). The frames are
    counted from the data read, not the header's count: a streamed WAV (``espeak-ng
    --stdout``) has a placeholder length there."""
    try:
        with wave.open(io.BytesIO(data)) as audio:
            frame = audio.getsampwidth() * audio.getnchannels()
            frames = len(audio.readframes(audio.getnframes())) // max(frame, 1)
            rate = audio.getframerate()
    except (wave.Error, EOFError):
        return None
    return frames / rate if rate else None


def _upload_seconds(request: Sample) -> float | None:
    """The seconds of WAV audio in a multipart sample's first file."""
    files = list((request.get("files") or {}).values())
    return wav_seconds(_bytes(files[0])) if files else None


def kind(endpoint: Endpoint) -> str:
    """The measurement an endpoint gets: ``speech``, ``transcription`` or ``requests``."""
    if endpoint.model_type is ModelType.SPEECH:
        return "speech"
    if endpoint.model_type is ModelType.TRANSCRIPTION:
        return "transcription"
    return "requests"


def measure_endpoint(
    client: httpx.Client, url: str, model: str, endpoint: Endpoint, request: Sample, quick: bool
) -> Benchmark:
    """``reps`` timed requests (1 with ``quick``, else 3; 3 and 10 for requests/s), each
    after an unmeasured warm-up; the numbers by :func:`kind`."""
    measured = kind(endpoint)
    reps = (1 if quick else 3) if measured != "requests" else (3 if quick else 10)
    found: Benchmark = {"endpoint": endpoint.path, "kind": measured, "reps": reps}
    walls, bodies = [], []
    for _ in range(reps):
        _send(client, url, endpoint, request)
        started = time.perf_counter()
        bodies.append(_send(client, url, endpoint, request))
        walls.append(time.perf_counter() - started)
    found["wall_ms"] = spread([w * 1000 for w in walls])
    if measured == "speech":
        audio = [wav_seconds(b) for b in bodies]
        if all(a is not None for a in audio):
            rates = [a / w for a, w in zip(audio, walls, strict=True) if a is not None]
            found["realtime_factor"] = spread(rates)
            found["audio_seconds"] = spread([a for a in audio if a is not None])
        else:
            found["bytes_per_second"] = spread(
                [len(b) / w for b, w in zip(bodies, walls, strict=True)]
            )
            found["note"] = NOT_WAV
    elif measured == "transcription":
        seconds = _upload_seconds(request)
        if seconds is not None:
            found["audio_seconds_per_second"] = spread([seconds / w for w in walls])
        else:
            upload = sum(len(_bytes(v)) for v in (request.get("files") or {}).values())
            found["bytes_per_second"] = spread([upload / w for w in walls])
            found["note"] = "the sample upload is not WAV audio: measured in bytes per second"
    else:
        found["requests_per_second"] = round(reps / sum(walls), 2)
    if (peak := peak_memory(client, url, model)) is not None:
        found["peak_memory_mib"] = round(peak / 2**20)
        found["peak_memory_note"] = "host memory of the engine; GPU memory is not counted"
    return found


def _bytes(value: object) -> bytes:
    content = value[1] if isinstance(value, tuple) else value
    return content if isinstance(content, bytes) else b""


def _send(
    client: httpx.Client, url: str, endpoint: Endpoint, request: Mapping[str, object]
) -> bytes:
    answer = client.post(url + endpoint.path, **request)  # type: ignore[arg-type]
    return expect(answer, 200, why=f"a benchmark request to {endpoint.path}").content


def headline(numbers: Benchmark) -> dict[str, str]:
    """The check's facts: the endpoint, the kind and its median."""
    facts = {"endpoint": numbers.get("endpoint", ""), "kind": numbers.get("kind", "")}
    for key, spreads in (
        ("realtime_factor", numbers.get("realtime_factor")),
        ("audio_seconds_per_second", numbers.get("audio_seconds_per_second")),
        ("bytes_per_second", numbers.get("bytes_per_second")),
    ):
        if spreads:
            facts[key] = str(spreads["p50"])
    if "requests_per_second" in numbers:
        facts["requests_per_second"] = str(numbers["requests_per_second"])
    if "note" in numbers:
        facts["note"] = numbers["note"]
    return facts
