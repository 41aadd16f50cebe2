"""The shapes the translators send back to clients, as TypedDicts that mirror the SDKs'
types (each docstring names the one): OpenAI Responses objects and stream events (under
``openai/types/responses/``) and Anthropic Messages objects and stream events (under
``anthropic/types/``). What the client sent and is only echoed back is typed ``object``.
"""

from __future__ import annotations

from typing import Literal, TypeAlias, TypedDict

# --- OpenAI Responses ----------------------------------------------------------------

ItemStatus: TypeAlias = Literal["in_progress", "completed", "incomplete"]


class OutputText(TypedDict):
    """``ResponseOutputText`` (``response_output_text.py``)."""

    type: Literal["output_text"]
    text: str
    annotations: list[object]
    logprobs: list[object]


class OutputMessage(TypedDict):
    """``ResponseOutputMessage`` (``response_output_message.py``)."""

    type: Literal["message"]
    id: str
    status: ItemStatus
    role: Literal["assistant"]
    content: list[OutputText]


class FunctionCallItem(TypedDict):
    """``ResponseFunctionToolCall`` (``response_function_tool_call.py``)."""

    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus


OutputItem: TypeAlias = OutputMessage | FunctionCallItem


class InputTokensDetails(TypedDict):
    """``InputTokensDetails`` (``response_usage.py``)."""

    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(TypedDict):
    """``OutputTokensDetails`` (``response_usage.py``)."""

    reasoning_tokens: int


class ResponseUsage(TypedDict):
    """``ResponseUsage`` (``response_usage.py``)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens_details: OutputTokensDetails


class IncompleteDetails(TypedDict):
    """``IncompleteDetails`` (``response.py``)."""

    reason: Literal["max_output_tokens"]


class ResponseObject(TypedDict):
    """``Response`` (``response.py``); the request's settings are echoed as it sent them."""

    id: str
    object: Literal["response"]
    created_at: float
    status: ItemStatus
    error: None
    model: object
    output: list[OutputItem]
    usage: ResponseUsage | None
    incomplete_details: IncompleteDetails | None
    instructions: object
    metadata: object
    max_output_tokens: object
    temperature: object
    top_p: object
    tools: object
    tool_choice: object
    parallel_tool_calls: object
    text: object
    previous_response_id: None
    reasoning: object
    truncation: object
    user: object


class ResponseEvent(TypedDict):
    """``ResponseCreatedEvent``, ``ResponseInProgressEvent``, ``ResponseCompletedEvent``
    and ``ResponseIncompleteEvent`` (``response_created_event.py``, ...)."""

    type: Literal[
        "response.created", "response.in_progress", "response.completed", "response.incomplete"
    ]
    sequence_number: int
    response: ResponseObject


class OutputItemEvent(TypedDict):
    """``ResponseOutputItemAddedEvent`` and ``ResponseOutputItemDoneEvent``
    (``response_output_item_added_event.py``, ``response_output_item_done_event.py``)."""

    type: Literal["response.output_item.added", "response.output_item.done"]
    sequence_number: int
    output_index: int
    item: OutputItem


class ContentPartEvent(TypedDict):
    """``ResponseContentPartAddedEvent`` and ``ResponseContentPartDoneEvent``
    (``response_content_part_added_event.py``, ``response_content_part_done_event.py``)."""

    type: Literal["response.content_part.added", "response.content_part.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class TextDeltaEvent(TypedDict):
    """``ResponseTextDeltaEvent`` (``response_text_delta_event.py``)."""

    type: Literal["response.output_text.delta"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[object]


class TextDoneEvent(TypedDict):
    """``ResponseTextDoneEvent`` (``response_text_done_event.py``)."""

    type: Literal["response.output_text.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[object]


class ArgumentsDeltaEvent(TypedDict):
    """``ResponseFunctionCallArgumentsDeltaEvent``
    (``response_function_call_arguments_delta_event.py``)."""

    type: Literal["response.function_call_arguments.delta"]
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


class ArgumentsDoneEvent(TypedDict):
    """``ResponseFunctionCallArgumentsDoneEvent``
    (``response_function_call_arguments_done_event.py``)."""

    type: Literal["response.function_call_arguments.done"]
    sequence_number: int
    item_id: str
    output_index: int
    name: str
    arguments: str


class ErrorEvent(TypedDict):
    """``ResponseErrorEvent`` (``response_error_event.py``)."""

    type: Literal["error"]
    sequence_number: int
    code: str
    message: str
    param: None


ResponsesEvent: TypeAlias = (
    ResponseEvent
    | OutputItemEvent
    | ContentPartEvent
    | TextDeltaEvent
    | TextDoneEvent
    | ArgumentsDeltaEvent
    | ArgumentsDoneEvent
    | ErrorEvent
)


# --- Anthropic Messages --------------------------------------------------------------

StopReason: TypeAlias = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]


class AnthropicUsage(TypedDict):
    """``Usage`` (``usage.py``); in ``message_delta``, ``MessageDeltaUsage``
    (``message_delta_usage.py``)."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int


class TextBlock(TypedDict):
    """``TextBlock`` (``text_block.py``)."""

    type: Literal["text"]
    text: str


class ToolUseBlock(TypedDict):
    """``ToolUseBlock`` (``tool_use_block.py``)."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, object]  # the model's arguments, as it wrote them


ContentBlock: TypeAlias = TextBlock | ToolUseBlock


class AnthropicMessage(TypedDict):
    """``Message`` (``message.py``)."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[ContentBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: AnthropicUsage


class TokensCount(TypedDict):
    """``MessageTokensCount`` (``message_tokens_count.py``)."""

    input_tokens: int


class MessageStartEvent(TypedDict):
    """``RawMessageStartEvent`` (``raw_message_start_event.py``)."""

    type: Literal["message_start"]
    message: AnthropicMessage


class BlockStartEvent(TypedDict):
    """``RawContentBlockStartEvent`` (``raw_content_block_start_event.py``)."""

    type: Literal["content_block_start"]
    index: int
    content_block: ContentBlock


class TextDelta(TypedDict):
    """``TextDelta`` (``text_delta.py``)."""

    type: Literal["text_delta"]
    text: str


class InputJSONDelta(TypedDict):
    """``InputJSONDelta`` (``input_json_delta.py``)."""

    type: Literal["input_json_delta"]
    partial_json: str


class BlockDeltaEvent(TypedDict):
    """``RawContentBlockDeltaEvent`` (``raw_content_block_delta_event.py``)."""

    type: Literal["content_block_delta"]
    index: int
    delta: TextDelta | InputJSONDelta


class BlockStopEvent(TypedDict):
    """``RawContentBlockStopEvent`` (``raw_content_block_stop_event.py``)."""

    type: Literal["content_block_stop"]
    index: int


class MessageDelta(TypedDict):
    """``Delta`` (``raw_message_delta_event.py``)."""

    stop_reason: StopReason
    stop_sequence: str | None


class MessageDeltaEvent(TypedDict):
    """``RawMessageDeltaEvent`` (``raw_message_delta_event.py``)."""

    type: Literal["message_delta"]
    delta: MessageDelta
    usage: AnthropicUsage


class MessageStopEvent(TypedDict):
    """``RawMessageStopEvent`` (``raw_message_stop_event.py``)."""

    type: Literal["message_stop"]


class APIErrorObject(TypedDict):
    """One of ``ErrorObject`` (``shared/error_object.py``): ``type`` is the one the HTTP
    status would have (:func:`lemoncore.api.shapes.anthropic_type`; ``shared/
    error_type.py`` lists them), ``api_error`` for a failed engine."""

    type: str
    message: str


class AnthropicErrorEvent(TypedDict):
    """``ErrorResponse`` (``shared/error_response.py``): the stream's ``error`` event."""

    type: Literal["error"]
    error: APIErrorObject


MessagesEvent: TypeAlias = (
    MessageStartEvent
    | BlockStartEvent
    | BlockDeltaEvent
    | BlockStopEvent
    | MessageDeltaEvent
    | MessageStopEvent
    | AnthropicErrorEvent
)
