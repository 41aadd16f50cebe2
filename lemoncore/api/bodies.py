"""The HTTP API's request bodies as pydantic models, and :func:`parse`.

Handlers validate each body with :func:`parse`: a body that does not fit is a 400 that
names the field (``param``) and says what is wrong. Bodies are strict (a string is not a
number, ``1`` is not ``true``). :mod:`lemoncore.api.apidoc` generates the OpenAPI
document's request schemas from these models; :mod:`lemoncore.api.replies` holds the
answers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar, cast

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.config import JsonDict
from pydantic.json_schema import SkipJsonSchema

from lemoncore.api.errors import ApiError
from lemoncore.durations import keep_alive_seconds
from lemoncore.recipes import MAX_CHECKPOINT_LENGTH, MAX_NAME_LENGTH, Endpoint, plain_text


def _integral(value: object) -> object:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A JSON integer: 1.0 is one too (JSON Schema's `integer`); "1" and true are not.
JsonInt = Annotated[int, BeforeValidator(_integral)]
# Seconds (math.inf: forever) from a number or a duration string ("10m").
KeepAliveSeconds = Annotated[float | None, BeforeValidator(keep_alive_seconds)]
# A model name or checkpoint as a request gives it: bounded, and no control characters
# (a NUL would reach a path, a newline a log line).
ModelName = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_NAME_LENGTH), AfterValidator(plain_text)
]
CheckpointText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_CHECKPOINT_LENGTH),
    AfterValidator(plain_text),
]
_MODEL_NAME: TypeAdapter[str] = TypeAdapter(ModelName)


def checked_name(name: str, param: str = "model") -> str:
    """``name``, if a request may name a model so (:data:`ModelName`); else a 400
    ``invalid_model_name`` for ``param`` that quotes at most 80 characters of it."""
    try:
        return _MODEL_NAME.validate_python(name)
    except ValidationError as exc:
        shown = f"{name[:80]!r}{'...' if len(name) > 80 else ''}"
        raise ApiError(
            f"model name {shown}: {exc.errors()[0]['msg']}", code="invalid_model_name", param=param
        ) from None


class Body(BaseModel):
    """A request body. Fields a handler does not read are ignored, unless a body allows
    and forwards them (recipe options, an engine's own request fields)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


def _model_name(description: str) -> Any:
    return Field(
        validation_alias=AliasChoices("model_name", "model"),
        description=description + " (`model` is accepted too)",
    )


_CATALOGUE_NAME = "A model's name or alias (`smollm2`), with or without `:latest`"


class LoadBody(Body):
    """Load a model (or, with `dry_run`, say what loading it would do)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "additionalProperties": {
                "description": "An option the recipe or the chosen "
                "backend declares for requests (GET /api/v1/system-info "
                "lists them with their types and bounds), such as "
                "`ctx_size` or `llamacpp_args`"
            }
        },
    )

    model_name: ModelName = _model_name(_CATALOGUE_NAME)
    pinned: bool | None = Field(
        None, description="Keep the model loaded: eviction skips it (409 when every slot is pinned)"
    )
    backend: str | None = Field(
        None,
        description="The recipe's backend to run it on; "
        "default: the first installed, else installable, one",
    )
    keep_alive: KeepAliveSeconds = Field(
        None,
        description="How long it stays loaded with no request: "
        "seconds or a duration (`10m`); `-1` until evicted; default: the server's setting",
    )
    dry_run: bool = Field(
        False,
        description="Answer the plan (backend, device, options, "
        "what would be evicted and why) and change nothing",
    )
    save_options: bool = Field(
        False, description="Remember this request's recipe options for the model"
    )


class UnloadBody(Body):
    model_name: ModelName | None = Field(
        None,
        validation_alias=AliasChoices("model_name", "model"),
        description="The model to unload (`model` is accepted too); without it, every model",
    )


class ModelDefinition(Body):
    """A model (`checkpoint` and `recipe`) or a collection to register, or a registered
    one by name."""

    model_name: ModelName = _model_name(
        "The name to register (letters, digits and `._+-`, at most 128 characters; "
        "`user.NAME` is `NAME`); `/pull` also takes a registered or catalogue model's"
    )
    checkpoint: CheckpointText | None = Field(
        None,
        description="`owner/repo:file.gguf` (Hugging Face; or Lemonade's "
        "`owner/repo:VARIANT`, such as `:Q4_0`, a shard folder or `*`), "
        "`file:/abs/path.gguf` or `pkg:package/path.gguf`; registers the model",
    )
    checkpoints: dict[str, CheckpointText] = Field(
        {},
        description="Lemonade's form: `main` is `checkpoint`; `mmproj`, a file of the same "
        "repository (`owner/repo:file` or `file`), is added to `files`",
    )
    recipe: str = Field("", description="The recipe that runs it (with `checkpoint`)")
    labels: list[str] = Field(
        [],
        description="`embeddings`, `reranking`, `transcription`, `speech`, `image` (they "
        "set the model's type), `vision`, ...",
    )
    recipe_options: dict[str, object] = Field(
        {}, description="Options the recipe declares, used for each load of this model"
    )
    files: list[str] = Field(
        [],
        description="Other files of the checkpoint's repository "
        "the engine needs (split shards, mmproj, tokenizer), "
        "downloaded beside it",
    )
    sha256: dict[str, str] = Field(
        {},
        description="Published SHA-256 per file; a download that differs is removed and refused",
        json_schema_extra={"additionalProperties": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
    )
    sizes: dict[str, JsonInt] = Field(
        {},
        description="Published size in bytes per file; a download that differs is "
        "removed and refused",
        json_schema_extra={"additionalProperties": {"type": "integer", "minimum": 1}},
    )
    components: list[str] | None = Field(
        None,
        description="A collection's models, by name (with recipe `collection.omni` or "
        "`collection.router` and a `user.` name): registered ones, or defined in `models`",
    )
    models: list[dict[str, JsonValue]] | None = Field(
        None,
        description="Definitions (`/pull` bodies) of a collection's components that are not "
        "registered yet",
    )
    system_prompt: str | None = Field(None, description="A collection's own prompt, kept as is")
    version: str | None = Field(None, description="A router collection's policy schema version")
    routing: dict[str, JsonValue] | None = Field(
        None, description="A router collection's routing policy (Lemonade's schema)"
    )

    @model_validator(mode="before")
    @classmethod
    def _lemonade_checkpoints(cls, data: Any) -> Any:
        """Lemonade's ``checkpoints`` folded into ``checkpoint`` and ``files`` (then
        validated as those are); a 400 for ``checkpoints`` when they cannot be."""
        given = data.get("checkpoints") if isinstance(data, Mapping) else None
        if not given or not isinstance(given, Mapping):
            return data
        if unknown := sorted(set(given) - {"main", "mmproj"}):
            raise ApiError(
                f"checkpoints {unknown}: lemoncore's recipes take `main` and `mmproj` only",
                param="checkpoints",
            )
        main, mmproj = given.get("main", data.get("checkpoint")), given.get("mmproj")
        if not isinstance(main, str) or data.get("checkpoint") not in (None, main):
            raise ApiError(
                "give the model's checkpoint once, as a string: `checkpoint` or `checkpoints.main`",
                param="checkpoints",
            )
        folded = {**data, "checkpoint": main}
        if mmproj is not None:
            repo, sep, file = mmproj.rpartition(":") if isinstance(mmproj, str) else ("", "", "")
            if not file or (sep and repo != main.partition(":")[0]):
                raise ApiError(
                    f"checkpoints.mmproj {mmproj!r} is not a file of {main.partition(':')[0]}",
                    param="checkpoints",
                )
            files = data.get("files", [])
            folded["files"] = [*files, file] if isinstance(files, list) else files
        return folded


class PullBody(ModelDefinition):
    """Download a model; with `checkpoint` (and `recipe`), register it first."""

    stream: bool = Field(
        False, description="Answer an SSE stream of `progress` events, then `complete` or `error`"
    )


class DeleteBody(Body):
    model_name: ModelName = _model_name(
        "The downloaded model to remove (a user model is forgotten too)"
    )


_BACKEND = Field(
    min_length=1,
    description="`recipe:backend` (`llamacpp:cpu`), "
    "`runtime:therock`, or a backend name with `recipe`",
)


class UninstallBody(Body):
    backend: str = _BACKEND
    recipe: str | None = Field(
        None, description="The recipe, when `backend` is a bare backend name"
    )


class InstallBody(UninstallBody):
    consent: bool = Field(False, description="Consent to an experimental backend's first install")
    # Described, not a schema property: a fuzzer would otherwise download release assets.
    trust_download: SkipJsonSchema[bool] = False
    stream: bool = Field(
        False, description="Answer an SSE stream of `progress` events, then `complete` or `error`"
    )


class RoutedBody(Body):
    """What lemoncore reads of every routed request: the model and ``keep_alive``;
    every other field goes to the engine unchanged."""

    model_config = ConfigDict(extra="allow")

    model: ModelName = Field(description=_CATALOGUE_NAME)
    keep_alive: KeepAliveSeconds = Field(
        None,
        description="How long the model stays loaded after this "
        "request: seconds or a duration (`10m`); `0` unloads it after the answer, `-1` "
        "keeps it until evicted; default: unchanged. lemoncore's own, not sent to the "
        "engine",
    )


class StreamingBody(RoutedBody):
    """A request to an endpoint that can answer a stream."""

    stream: bool | None = Field(
        None,
        description="Answer an SSE stream that ends with "
        "`data: [DONE]`; `: ping` comments while the engine is "
        "silent",
    )


class InferenceBody(StreamingBody):
    """A chat or completion request: ``max_tokens`` too."""

    max_tokens: JsonInt | None = None


class ChatBody(InferenceBody):
    messages: list[dict[str, object]] = Field(
        description="The conversation, as OpenAI's chat format"
    )
    max_completion_tokens: JsonInt | None = Field(
        None, description="Becomes `max_tokens` when that is absent"
    )


class CompletionBody(InferenceBody):
    prompt: str | list[object] | dict[str, object] = Field(
        description="A string, an array of strings or tokens, or what the engine accepts"
    )
    max_completion_tokens: JsonInt | None = Field(
        None, description="Becomes `max_tokens` when that is absent"
    )


class EmbeddingBody(RoutedBody):
    input: str | list[object] = Field(description="A string or an array of strings or tokens")


_CORE_BODIES: dict[str, type[RoutedBody]] = {
    "/v1/chat/completions": ChatBody,
    "/v1/completions": CompletionBody,
    "/v1/embeddings": EmbeddingBody,
}


@functools.cache
def body_of(endpoint: Endpoint) -> type[RoutedBody]:
    """The body lemoncore checks for ``endpoint``: ``model``, ``keep_alive``, ``stream``
    where it streams, then the endpoint's own ``request`` model (or its ``required``
    field); every field reaches the engine unchanged."""
    if endpoint.path in _CORE_BODIES:
        return _CORE_BODIES[endpoint.path]
    base = StreamingBody if endpoint.streams else RoutedBody
    bases: tuple[type[BaseModel], ...] = (base,)
    if endpoint.request is not None:
        bases = (base, endpoint.request)  # lemoncore's fields and strictness first
    fields: dict[str, Any] = {}  # Any: mypy checks **fields against __base__ too
    if endpoint.required and not any(endpoint.required in b.model_fields for b in bases):
        fields[endpoint.required] = (Any, Field(description="Required; passed to the engine"))
    name = "".join(p.title() for p in re.split(r"[/_-]", endpoint.path) if p) + "Body"
    # The first base is a RoutedBody, so the model is one.
    routed = cast("tuple[type[RoutedBody], ...]", bases)
    return create_model(name, __base__=routed, __doc__=endpoint.summary, **fields)


@functools.cache
def form_of(endpoint: Endpoint) -> type[Body]:
    """The ``multipart/form-data`` fields lemoncore checks for ``endpoint`` (for the
    OpenAPI document: the upload itself reaches the engine byte for byte)."""
    binary: JsonDict = {"type": "string", "format": "binary"}
    fields: dict[str, Any] = {  # Any: see body_of
        endpoint.model_field: (str, Field(description=_CATALOGUE_NAME))
    }
    if endpoint.required:
        fields[endpoint.required] = (
            bytes,
            Field(description="Required; passed to the engine", json_schema_extra=binary),
        )
    if endpoint.streams:
        fields["stream"] = (bool, Field(False, description="Answer an SSE stream"))
    name = "".join(p.title() for p in re.split(r"[/_-]", endpoint.path) if p) + "Form"
    return create_model(name, __base__=Body, __doc__=endpoint.summary, **fields)


B = TypeVar("B", bound=Body)


def parse(model: type[B], body: Mapping[str, object]) -> B:
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
