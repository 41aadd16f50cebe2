"""Ollama's request bodies, validated: a bad body is a 400 whose message names each wrong
field, never a traceback. Unknown fields are ignored, as Ollama does; the fields this API
cannot honour are refused by the handlers that read them."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from lemoncore.plugin import LemonError, keep_alive_seconds


class BadRequest(LemonError):
    """A request body this API refuses; the message says what to change."""

    status, type, code = 400, "invalid_request_error", "invalid_request"


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """A JSON ``null`` means "not given", as Ollama (Go) reads it."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


class Named(_Body):
    """A body naming a model: ``model``, or Ollama's older spelling ``name``."""

    model: str = ""
    name: str = ""

    @model_validator(mode="after")
    def _named(self) -> Named:
        if not (self.model or self.name).strip():
            raise ValueError("'model' is required: the name of a model (see GET /api/tags)")
        return self

    @property
    def target(self) -> str:
        return self.model or self.name


class Options(_Body):
    """The Modelfile parameters this API maps (``options``); others are ignored."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: list[str] | None = None
    num_predict: int | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    num_ctx: int | None = Field(None, gt=0)


class Function(_Body):
    name: str
    arguments: dict[str, Any] = {}


class ToolCall(_Body):
    id: str = ""
    function: Function


class Message(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    images: list[str] = []
    tool_calls: list[ToolCall] = []
    tool_name: str = ""
    tool_call_id: str = ""


Format = Literal["", "json"] | dict[str, Any] | None


class _Inference(Named):
    options: Options = Options()
    # seconds; 0 unloads after the answer, math.inf keeps loaded (lemoncore's only way)
    keep_alive: Annotated[float | None, BeforeValidator(keep_alive_seconds)] = None


class _Generating(_Inference):
    stream: bool = True
    format: Format = None
    think: bool | str | None = None  # accepted; a thinking model's reasoning is returned


class ChatBody(_Generating):
    messages: list[Message] = []
    tools: list[dict[str, Any]] = []


class GenerateBody(_Generating):
    prompt: str = ""
    system: str = ""
    suffix: str = ""
    template: str = ""
    context: list[int] = []
    raw: bool = False
    images: list[str] = []


class EmbedBody(_Inference):
    input: str | list[str]
    truncate: bool = True
    dimensions: int | None = None


class EmbeddingsBody(_Inference):
    prompt: str = ""


class PullBody(Named):
    insecure: bool = False
    stream: bool = True


class ShowBody(Named):
    verbose: bool = False


class DeleteBody(Named):
    pass


B = TypeVar("B", bound=_Body)


def parse(schema: type[B], raw: bytes) -> B:
    """``raw`` (a request's body) as ``schema``; a :class:`BadRequest` listing every
    problem otherwise."""
    try:
        return schema.model_validate_json(raw or b"null")
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            where = ".".join(str(p) for p in error["loc"])
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(f"{where}: {message}" if where else message)
        raise BadRequest("invalid request body: " + "; ".join(problems)) from None
