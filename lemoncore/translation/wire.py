"""The OpenAI chat-completions shapes the translators build and read, as TypedDicts that
mirror the ``openai`` SDK's types (each docstring names the one, under ``openai/types/``):
the request sent to the engine, which has the keys the SDK requires, and the engine's
answer and stream chunks, parsed JSON taken as it came, so every key there is optional
(``total=False``) and read with ``get``. The shapes sent back to clients are in
:mod:`.client_wire`.
"""

from __future__ import annotations

from typing import Literal, Required, TypeAlias, TypedDict

ChatRole: TypeAlias = Literal["system", "user", "assistant", "tool"]


# --- the request sent to the engine ------------------------------------------------


class ImageURL(TypedDict, total=False):
    """``ImageURL`` (``chat/chat_completion_content_part_image_param.py``)."""

    url: Required[str]
    detail: Literal["auto", "low", "high"]


class TextPart(TypedDict):
    """``ChatCompletionContentPartTextParam``
    (``chat/chat_completion_content_part_text_param.py``)."""

    type: Literal["text"]
    text: str


class ImagePart(TypedDict):
    """``ChatCompletionContentPartImageParam``
    (``chat/chat_completion_content_part_image_param.py``)."""

    type: Literal["image_url"]
    image_url: ImageURL


ContentPart: TypeAlias = TextPart | ImagePart


class CallFunction(TypedDict):
    """``Function`` (``chat/chat_completion_message_function_tool_call_param.py``)."""

    name: str
    arguments: str


class ToolCall(TypedDict):
    """``ChatCompletionMessageFunctionToolCallParam``: a tool call in the history."""

    id: str
    type: Literal["function"]
    function: CallFunction


class ChatMessage(TypedDict, total=False):
    """``ChatCompletionMessageParam`` (``chat/chat_completion_message_param.py``): the
    system, user, assistant and tool message params in one shape."""

    role: Required[ChatRole]
    content: Required[str | list[ContentPart] | None]
    tool_calls: list[ToolCall]
    tool_call_id: str


class FunctionDefinition(TypedDict, total=False):
    """``FunctionDefinition`` (``shared_params/function_definition.py``)."""

    name: Required[str]
    parameters: dict[str, object]  # a JSON Schema, passed on as the client sent it
    description: str
    strict: bool | None


class Tool(TypedDict):
    """``ChatCompletionFunctionToolParam`` (``chat/chat_completion_function_tool_param.py``)."""

    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(TypedDict):
    """``Function`` (``chat/chat_completion_named_tool_choice_param.py``)."""

    name: str


class NamedToolChoice(TypedDict):
    """``ChatCompletionNamedToolChoiceParam``
    (``chat/chat_completion_named_tool_choice_param.py``)."""

    type: Literal["function"]
    function: NamedFunction


ToolChoice: TypeAlias = Literal["none", "auto", "required"] | NamedToolChoice


class JSONSchema(TypedDict, total=False):
    """``JSONSchema`` (``shared_params/response_format_json_schema.py``)."""

    name: Required[str]
    schema: dict[str, object]  # passed on as the client sent it
    strict: bool | None
    description: str


class JSONSchemaFormat(TypedDict):
    """``ResponseFormatJSONSchema`` (``shared_params/response_format_json_schema.py``)."""

    type: Literal["json_schema"]
    json_schema: JSONSchema


class JSONObjectFormat(TypedDict):
    """``ResponseFormatJSONObject`` (``shared_params/response_format_json_object.py``)."""

    type: Literal["json_object"]


class StreamOptions(TypedDict):
    """``ChatCompletionStreamOptionsParam`` (``chat/chat_completion_stream_options_param.py``)."""

    include_usage: bool


class ChatRequest(TypedDict, total=False):
    """``CompletionCreateParams`` (``chat/completion_create_params.py``), the fields the
    translators set; ``top_k`` is llama.cpp's and vLLM's. ``model`` is the client's, as it
    came."""

    model: Required[str | None]
    messages: Required[list[ChatMessage]]
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    parallel_tool_calls: bool
    stop: list[str]
    stream: bool
    stream_options: StreamOptions
    tools: list[Tool]
    tool_choice: ToolChoice
    response_format: JSONSchemaFormat | JSONObjectFormat


# --- the engine's answer, as it came -----------------------------------------------


class PromptTokensDetails(TypedDict, total=False):
    """``PromptTokensDetails`` (``completion_usage.py``)."""

    cached_tokens: int | None


class CompletionTokensDetails(TypedDict, total=False):
    """``CompletionTokensDetails`` (``completion_usage.py``)."""

    reasoning_tokens: int | None


class Usage(TypedDict, total=False):
    """``CompletionUsage`` (``completion_usage.py``)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None
    prompt_tokens_details: PromptTokensDetails | None
    completion_tokens_details: CompletionTokensDetails | None


class AnswerFunction(TypedDict, total=False):
    """``Function`` (``chat/chat_completion_message_function_tool_call.py``)."""

    name: str
    arguments: str


class AnswerToolCall(TypedDict, total=False):
    """``ChatCompletionMessageFunctionToolCall``
    (``chat/chat_completion_message_function_tool_call.py``)."""

    id: str
    type: Literal["function"]
    function: AnswerFunction


class AnswerMessage(TypedDict, total=False):
    """``ChatCompletionMessage`` (``chat/chat_completion_message.py``)."""

    role: str
    content: str | None
    tool_calls: list[AnswerToolCall] | None


class Choice(TypedDict, total=False):
    """``Choice`` (``chat/chat_completion.py``); ``stop_reason`` is vLLM's: the stop string
    (or token id) that ended the answer."""

    index: int
    message: AnswerMessage
    finish_reason: str | None
    stop_reason: object


class Verbose(TypedDict, total=False):
    """llama-server's ``__verbose`` (``server-task.cpp``, ``to_json_non_oaicompat``),
    which it adds to an answer when the request has ``"verbose": true``; trimmed to the
    fields the request's ``response_fields`` names. ``stopping_word``: the stop string
    that ended the answer (``""`` when none did)."""

    stopping_word: str


# Not the SDK's: the key is no Python name (a class body would mangle ``__verbose``).
_LlamaExtras = TypedDict("_LlamaExtras", {"__verbose": Verbose}, total=False)


class ChatCompletion(_LlamaExtras, total=False):
    """``ChatCompletion`` (``chat/chat_completion.py``); ``__verbose`` is llama-server's
    (:class:`Verbose`)."""

    id: str
    created: int
    model: str
    choices: list[Choice]
    usage: Usage | None


class DeltaFunction(TypedDict, total=False):
    """``ChoiceDeltaToolCallFunction`` (``chat/chat_completion_chunk.py``)."""

    name: str | None
    arguments: str | None


class DeltaToolCall(TypedDict, total=False):
    """``ChoiceDeltaToolCall`` (``chat/chat_completion_chunk.py``): a piece of a tool call,
    joined to the others by ``index``."""

    index: int
    id: str | None
    type: Literal["function"] | None
    function: DeltaFunction | None


class Delta(TypedDict, total=False):
    """``ChoiceDelta`` (``chat/chat_completion_chunk.py``)."""

    role: str | None
    content: str | None
    tool_calls: list[DeltaToolCall] | None


class ChunkChoice(TypedDict, total=False):
    """``Choice`` (``chat/chat_completion_chunk.py``); ``stop_reason`` as in :class:`Choice`."""

    index: int
    delta: Delta
    finish_reason: str | None
    stop_reason: object


class ChatChunk(_LlamaExtras, total=False):
    """``ChatCompletionChunk`` (``chat/chat_completion_chunk.py``); ``error`` is not the
    SDK's: an engine's error in the stream, ``{"message": ...}`` or a string; nor is
    ``__verbose``, which llama-server puts on the first chunk of its last result
    (``to_json_oaicompat_chat_stream``, ``deltas.front()``)."""

    id: str
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None
    error: object
