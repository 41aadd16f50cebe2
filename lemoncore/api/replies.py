"""The HTTP API's answers as pydantic models, and :func:`reply`.

Handlers build their answers from these models; :mod:`lemoncore.api.apidoc` generates
the OpenAPI document's response schemas from them. A reply forbids fields it does not
declare, so a handler that answers more than the document says fails the tests
(``tests/test_fuzz.py`` checks every answer against the document).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from lemoncore.installs.backend_status import BackendState, unusable
from lemoncore.recipes import Device, Format, ModelType, SlotPolicy, Tier

if TYPE_CHECKING:
    from lemoncore.serving.planner import LoadPlan
    from lemoncore.serving.server import LoadedServer


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
    checkpoints: dict[str, str] = Field(
        description="Lemonade's form: `main` (the checkpoint) and `mmproj` (its projector "
        "file), when it has one"
    )
    recipe: str
    model_type: ModelType = Field(
        description="What the model does (health calls it `type`): it decides its endpoints; "
        "not `type`, which Anthropic's model objects use"
    )
    backends: list[BackendRef]
    downloaded: bool
    deletable: bool = Field(
        description="Whether a delete removes anything; else it is refused (422)"
    )
    suggested: bool
    labels: list[str]
    aliases: list[str]
    recipe_options: dict[str, Any] = Field(description="Its own, and those saved for it")
    context_length: int | None = Field(
        None, description="The context size it runs (or would load) with; absent: its own"
    )
    max_context_window: int | None = Field(
        None, description="The context its weights were trained for (a downloaded GGUF's)"
    )
    size_bytes: int | None = Field(
        None,
        description="Its files' published sizes, summed; else what its downloaded files "
        "take on disk; absent when unknown",
    )
    size: float | None = Field(None, description="`size_bytes` in GiB (Lemonade's `size`)")
    components: list[str] | None = Field(
        None, description="A collection's models, by their public names; absent on a model"
    )
    system_prompt: str | None = Field(None, description="A collection's own prompt")
    version: str | None = Field(None, description="A router collection's policy version")
    routing: dict[str, Any] | None = Field(None, description="A router collection's policy")


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
    status: Literal["busy", "ready", "downsized"] = Field(
        description="downsized: idle, and its engine gave back what it held (auto-eviction's "
        "downsize_idle_timeout); its next request finds it ready"
    )
    is_busy: bool = Field(description="Whether it is answering or queueing a request now")
    is_streaming: bool = Field(description="Whether it is streaming an answer now")
    pinned: bool
    in_flight: int
    queued: int
    recipe_options: dict[str, Any]
    launch_command: list[str]
    rpc_workers: list[str] = Field(
        description="The llama.cpp RPC workers it placed layers on (host:port)"
    )
    peak_memory_bytes: int | None
    idle_seconds: float = Field(description="Since its last request ended (0 while busy)")
    keep_alive: float | None = Field(
        description="Idle seconds before it is unloaded; null: kept until evicted or unloaded"
    )
    unload_in_seconds: float | None = Field(
        description="When it will be unloaded for idleness; null while busy or pinned, or "
        "when its keep_alive is forever"
    )

    @classmethod
    def of(
        cls, server: LoadedServer, streaming: bool = False, command: list[str] | None = None
    ) -> LoadedModel:
        """How ``/api/v1/health`` (and :meth:`Gateway.loaded`) show ``server`` now;
        ``command``: its launch command as shown (default: as started)."""
        now, process, busy = time.monotonic(), server.process, bool(server.in_flight)
        uds = getattr(process, "uds", None)
        until = server.resident().idle_until()
        return cls(
            model_name=server.model.name,
            checkpoint=server.model.checkpoint,
            recipe=server.recipe.name,
            backend=server.backend.name,
            type=server.model.model_type,
            device=server.device,
            is_amd_gpu=server.is_amd_gpu,
            slot_policy=server.policy,
            backend_url=f"unix:{uds}" if uds else process.base_url,
            pid=process.pid,
            status="busy" if busy else "downsized" if server.downsized else "ready",
            is_busy=busy or server.queued > 0,
            is_streaming=streaming,
            pinned=server.pinned,
            in_flight=server.in_flight,
            queued=server.queued,
            recipe_options=server.options,
            launch_command=list(process.argv) if command is None else command,
            rpc_workers=list(server.workers),
            peak_memory_bytes=process.peak_memory(),
            idle_seconds=0.0 if busy else round(now - server.last_used, 1),
            keep_alive=None if math.isinf(server.keep_alive) else server.keep_alive,
            unload_in_seconds=None if until is None else round(max(0.0, until - now), 1),
        )


class HeldOff(Reply):
    """A model whose starts failed and are held off (the crash-loop cooldown): requests
    are refused with the last failure until `retry_in_s` passes; an explicit load
    retries at once."""

    model: str
    reason: str = Field(
        description="The last failure in one line: how the engine ended "
        "(the signal by name), what that means and the fix"
    )
    failures: int = Field(description="Failed starts in a row")
    retry_in_s: float = Field(description="Seconds until a request may start it again")


class TelemetryState(Reply):
    enabled: Literal[False] = False  # Lemonade's trace telemetry: lemoncore sends none


class Health(Reply):
    status: Literal["ok"] = "ok"
    version: str
    telemetry: TelemetryState = Field(default_factory=TelemetryState)
    model_loaded: str | None = Field(description="The most recently used model")
    max_models: dict[ModelType, int]
    all_models_loaded: list[LoadedModel]
    held_off: list[HeldOff] = Field(description="Models held off after failed starts, and why")


class Loaded(Reply):
    status: Literal["success"] = "success"
    model_name: str
    checkpoint: str
    recipe: str
    backend: str
    device: Device
    pinned: bool


class CollectionLoaded(Reply):
    status: Literal["success"] = "success"
    model_name: str
    checkpoint: str = ""
    recipe: str


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
    rpc_workers: list[str] = Field(description="The RPC workers it would place layers on")
    evict: list[Eviction]
    dry_run: Literal[True] = True

    @classmethod
    def of(cls, plan: LoadPlan) -> LoadPlanReply:
        """``plan`` as a ``dry_run`` load answers it."""
        cannot_start = plan.refusal or unusable(plan.backend)
        return cls(
            model_name=plan.model.name,
            recipe=plan.recipe.name,
            backend=plan.backend.backend.name,
            backend_state=plan.backend.state,
            device=plan.device,
            is_amd_gpu=plan.is_amd_gpu,
            slot_policy=plan.policy,
            options=plan.options,
            refused=cannot_start or plan.decision.refused,
            already_loaded=plan.already_loaded,
            rpc_workers=list(plan.workers),
            evict=[]  # a load refused before its evictions evicts nothing
            if cannot_start
            else [
                Eviction(model_name=e.name, kind=e.kind.value, reason=e.reason)
                for e in plan.decision.evict
            ],
        )


class Done(Reply):
    status: Literal["success"] = "success"
    message: str


class PullResult(Reply):
    model_name: str
    path: str


class Pulled(PullResult):
    status: Literal["success"] = "success"


class Registered(Reply):
    """A registered definition: ``model_name`` its public id, ``canonical_model_name``
    its ``user.`` name (Lemonade's ``handle_model_register``)."""

    status: Literal["success"] = "success"
    model_name: str
    canonical_model_name: str
    model: ModelCard


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
    trusted: list[TrustedArtifact] = Field(
        description="Artifacts pinned by this install (`trust_download`)"
    )


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


class LogEntry(Reply):
    """A line of the server's log (`GET /api/v1/logs`), as printed without colour."""

    seq: int = Field(description="Increases by one per line; `after` resumes from it")
    time: str
    level: str
    event: str
    model: str | None = Field(description="The model a line is about, if any")
    source: Literal["backend", "lemoncore"] = Field(description="`backend`: an engine's own output")
    line: str
    fields: dict[str, str] = Field(description="The event's other values, as in `line`")


class LogEntries(Reply):
    object: Literal["list"] = "list"
    data: list[LogEntry] = Field(description="Oldest first")
    last: int = Field(description="The `seq` of the newest line logged (any model); 0 if none")
    live: bool = Field(
        description="Whether new lines arrive (the server configured its "
        "logging); `follow` streams them"
    )
