"""What a validation report says of each part, as the JSON shapes ``report.json`` holds
(``docs/validation.md``): the host (:mod:`~.host`), the versions and the backend under
test (:mod:`~.evidence`), and the benchmark (:mod:`~.benchmark`)."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class DeviceFacts(TypedDict):
    """A device lemoncore detects; ``family`` for an AMD GPU, ``integrated`` when true."""

    kind: str
    name: str
    index: int
    family: NotRequired[str]
    integrated: NotRequired[bool]


class HostFacts(TypedDict, total=False):
    os: str
    platform: str
    kernel: str
    machine: str
    drivers: dict[str, str]  # amdgpu, nvidia: their versions, where readable
    devices: list[DeviceFacts]


class PluginVersion(TypedDict):
    version: str
    distribution: str
    status: str


class Versions(TypedDict, total=False):
    lemoncore: str
    server: str
    python: str
    plugins: dict[str, PluginVersion]


class PinnedArtifact(TypedDict):
    url: str
    sha256: str  # "UNVERIFIED" when the pin has none
    provenance: str


class LockPin(TypedDict):
    """The lock's pin of the backend: its version and artifacts."""

    version: str
    artifacts: list[PinnedArtifact]


class ArtifactFacts(TypedDict):
    url: str
    sha256: str | None


class InstalledFacts(TypedDict, total=False):
    """What lemoncore recorded of an install (:class:`~lemoncore.installs.record.InstallRecord`):
    the version, the artifacts and what an installer returned (an image ID, say)."""

    version: str
    artifacts: list[ArtifactFacts]
    result: str


BackendFacts = TypedDict(
    "BackendFacts",
    {
        "name": str,
        "owner plugin": str,
        "tier": str,
        "format": str,
        "state": str,
        "version": str,
        "pin": LockPin | str,
        "installed": InstalledFacts | str,
    },
    total=False,
)
"""The backend under test; ``pin`` and ``installed`` say why when there is none."""


class ScenarioNumbers(TypedDict):
    """A scenario's spreads (``lemoncore.bench.spread``: n, p50, p10, p90, p99, stdev)."""

    ttft_ms: dict[str, float]
    decode_tps: dict[str, float]
    prompt_tps: dict[str, float]


class Benchmark(TypedDict, total=False):
    """A chat backend's numbers (``max_tokens``, ``short``, ``long``, cold start), or
    another endpoint kind's (``endpoint``, ``kind``: ``speech``, ``transcription``,
    ``requests``; spreads of ``wall_ms`` and of its measure)."""

    reps: int
    endpoint: str  # the path measured
    kind: str  # chat, speech, transcription or requests
    max_tokens: int
    short: ScenarioNumbers
    long: ScenarioNumbers  # not with --quick
    peak_memory_mib: int
    peak_memory_note: str
    cold_start_ttft_ms: float  # not with --quick
    wall_ms: dict[str, float]  # per request
    realtime_factor: dict[str, float]  # speech: audio seconds produced per wall second
    audio_seconds: dict[str, float]  # speech: the audio each answer held
    audio_seconds_per_second: dict[str, float]  # transcription: of the sample upload
    bytes_per_second: dict[str, float]  # audio that is not WAV
    requests_per_second: float  # any other endpoint
    note: str  # why a measure is not the kind's usual one
