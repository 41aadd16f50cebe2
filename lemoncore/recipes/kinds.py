"""The vocabularies of contributed data: device kinds and classes, slot policies, tiers,
engine formats and model types, as plain string enums that support rows, recipes,
models and host facts name."""

from __future__ import annotations

from enum import StrEnum


class DeviceKind(StrEnum):
    """A concrete kind of compute device, as it appears in support rows and host facts."""

    CPU = "cpu"
    AMD_GPU = "amd_gpu"
    NVIDIA_GPU = "nvidia_gpu"
    INTEL_GPU = "intel_gpu"
    AMD_NPU = "amd_npu"

    @property
    def device(self) -> Device:
        return (
            Device.CPU
            if self is DeviceKind.CPU
            else (Device.NPU if self is DeviceKind.AMD_NPU else Device.GPU)
        )


class Device(StrEnum):
    """The device class a loaded server occupies."""

    CPU = "cpu"
    GPU = "gpu"
    NPU = "npu"


class SlotPolicy(StrEnum):
    """How a loaded server counts against the router's slots."""

    STANDARD = "standard"
    EXCLUSIVE_GPU = "exclusive_gpu"
    EXCLUSIVE_NPU = "exclusive_npu"
    COEXIST_BY_TYPE = "coexist_by_type"
    UNMETERED = "unmetered"


class Tier(StrEnum):
    """How far lemoncore vouches for a backend; it decides consent and listing, nothing
    about how the backend runs. ``core``: granted only by lemoncore's registry
    (``lemoncore/data/tiers.json``); a plugin claiming it is listed as ``community``.
    ``community``: installs with a notice. ``experimental``: needs the user's consent
    before its first install, and its models are hidden from ``/v1/models`` until it is
    installed. ``lemon tiers`` shows each backend's evidence."""

    CORE = "core"
    COMMUNITY = "community"
    EXPERIMENTAL = "experimental"


class Format(StrEnum):
    """How a backend's engine is packaged: a label shown in ``/v1/models``,
    ``/api/v1/system-info`` and ``lemon backends``, so users know what they run. The core
    does nothing else with it: what runs is what the ``launch`` hook returns (a
    :class:`~lemoncore.launch.LaunchSpec` the core spawns, or a
    :class:`~lemoncore.launch.Runner`)."""

    NATIVE = "native"
    PYTHON = "python"
    CONTAINER = "container"


class ModelType(StrEnum):
    """What a model does, derived from its labels: it decides which endpoints may route
    to the model (each :class:`~lemoncore.recipes.Endpoint` names one type) and the LRU
    pool it is counted in."""

    LLM = "llm"
    EMBEDDING = "embedding"
    RERANKING = "reranking"
    TRANSCRIPTION = "transcription"  # speech to text
    SPEECH = "speech"  # text to speech
    IMAGE = "image"
