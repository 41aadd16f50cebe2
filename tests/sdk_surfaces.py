"""The SDK code every backend lemoncore translates Messages and Responses for must answer:
the stock ``openai`` and ``anthropic`` clients used as their docs say, through their own
stream helpers (``responses.stream``, ``messages.stream``), whose accumulators
(``openai/lib/streaming/responses/_responses.py``, ``anthropic/lib/streaming/
_messages.py``) raise on a malformed stream. Each function checks one case against a
running server's ``model`` and raises ``AssertionError`` (or the SDK's error) when it
fails; the test modules of each backend call the same functions
(``tests/test_translated_echo.py`` on a chat-only engine,
``plugins/llamacpp/tests/test_translated_surfaces.py`` on llama-server).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anthropic
import openai
from anthropic.types import Message, Usage
from openai.types.responses import ResponseStreamEvent

SHORT = "Say hello in one word."  # answered well within 64 tokens
COUNTING = "Count from 1 to 10, separated by commas."  # an answer of many words
LONG = "Write a long story about a dragon who learns to bake bread."  # never fits in 4
GREEDY: dict[str, Any] = {"temperature": 0}  # the anthropic SDK has no temperature


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def responses_events_are_well_formed(events: list[ResponseStreamEvent]) -> None:
    """Sequence numbers 0, 1, 2, ...; one ``created`` then one ``in_progress``; each text
    delta names its item and indices as the item it belongs to was announced."""
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = Counter(e.type for e in events)
    assert kinds["response.created"] == kinds["response.in_progress"] == 1
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    added = {e.output_index: e.item.id for e in events if e.type == "response.output_item.added"}
    for e in events:
        if e.type == "response.output_text.delta":
            assert (added[e.output_index], e.content_index) == (e.item_id, 0)


def responses_stream_completes(gpt: openai.OpenAI, model: str) -> None:
    with gpt.responses.stream(
        model=model, input=SHORT, max_output_tokens=64, temperature=0
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    responses_events_are_well_formed(events)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and final.output_text == text
    assert (final.status, final.incomplete_details) == ("completed", None)
    assert events[-1].type == "response.completed"
    assert final.id.startswith("resp_") and final.output[0].id.startswith("msg_")
    assert final.usage is not None and 0 < final.usage.output_tokens <= 64


def responses_cut_is_incomplete(gpt: openai.OpenAI, model: str) -> None:
    """Cut by ``max_output_tokens``: ``incomplete`` with its reason, streamed (ending
    ``response.incomplete``; the SDK's ``get_final_response()`` is for completed ones)
    and not."""
    with gpt.responses.stream(model=model, input=LONG, max_output_tokens=4) as stream:
        events = list(stream)
    responses_events_are_well_formed(events)
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.status == "incomplete" and last.response.incomplete_details
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.usage is not None and last.response.usage.output_tokens == 4
    answer = gpt.responses.create(model=model, input=LONG, max_output_tokens=4)
    assert answer.status == "incomplete" and answer.incomplete_details is not None
    assert answer.incomplete_details.reason == "max_output_tokens" and answer.output_text


def responses_echo_the_request(gpt: openai.OpenAI, model: str) -> None:
    tool: Any = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "strict": False,
    }
    answer = gpt.responses.create(
        model=model,
        input=SHORT,
        instructions="Be brief.",
        max_output_tokens=16,
        temperature=0.5,
        top_p=0.9,
        metadata={"run": "1"},
        tools=[tool],
        tool_choice="none",
        parallel_tool_calls=False,
    )
    assert (
        answer.instructions,
        answer.max_output_tokens,
        answer.temperature,
        answer.top_p,
        answer.metadata,
        answer.tool_choice,
        answer.parallel_tool_calls,
    ) == ("Be brief.", 16, 0.5, 0.9, {"run": "1"}, "none", False)
    assert [t.name for t in answer.tools] == ["get_weather"]  # type: ignore[union-attr]
    assert answer.text is not None and answer.text.format is not None
    assert answer.text.format.type == "text" and answer.model == model
    bare = gpt.responses.create(model=model, input=SHORT, max_output_tokens=16)
    assert (
        bare.instructions,
        bare.max_output_tokens,
        bare.tools,
        bare.tool_choice,
        bare.parallel_tool_calls,
        bare.metadata,
    ) == (None, 16, [], "auto", True, {})


def messages_stream(claude: anthropic.Anthropic, model: str) -> Message:
    with claude.messages.stream(
        model=model, max_tokens=64, messages=user(SHORT), extra_body=GREEDY
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and [b.type for b in final.content] == ["text"]
    assert final.content[0].text == text  # type: ignore[union-attr]
    assert (final.stop_reason, final.stop_sequence) == ("end_turn", None)
    assert final.id.startswith("msg_") and final.model == model
    assert 0 < final.usage.output_tokens <= 64
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > 0
    return final


def stop_sequences_cut(claude: anthropic.Anthropic, model: str) -> list[Message]:
    """The answer to a question, then the same with a stop sequence from its middle:
    the text ends before it, streamed and not, and says why (``stop_sequence`` where the
    engine names the match, else ``end_turn`` with none); the two answers returned."""
    ask: dict[str, Any] = {
        "model": model,
        "max_tokens": 48,
        "messages": user(COUNTING),
        "extra_body": GREEDY,
    }
    full = claude.messages.create(**ask).content[0].text  # type: ignore[union-attr]
    words = full.split()
    assert len(words) >= 3, full
    stop = words[len(words) // 2]
    cut = claude.messages.create(**ask, stop_sequences=[stop])
    with claude.messages.stream(**ask, stop_sequences=[stop]) as stream:
        streamed = stream.get_final_message()
    for answer in (cut, streamed):
        text = answer.content[0].text  # type: ignore[union-attr]
        assert text.rstrip() == full[: full.index(stop)].rstrip(), (text, full, stop)
        assert (answer.stop_reason, answer.stop_sequence) in {
            ("stop_sequence", stop),
            ("end_turn", None),
        }, answer
    return [cut, streamed]


def max_tokens_cut(claude: anthropic.Anthropic, model: str) -> None:
    cut = claude.messages.create(model=model, max_tokens=3, messages=user(LONG))
    assert (cut.stop_reason, cut.usage.output_tokens) == ("max_tokens", 3)
    with claude.messages.stream(model=model, max_tokens=3, messages=user(LONG)) as stream:
        streamed = stream.get_final_message()
    assert (streamed.stop_reason, streamed.usage.output_tokens) == ("max_tokens", 3)


MALFORMED: list[tuple[dict[str, Any], str]] = [  # (request, a word of the refusal)
    ({"messages": []}, "non-empty list of"),
    ({"messages": "Hi"}, "non-empty list of"),
    ({"messages": [{"role": "robot", "content": "Hi"}]}, "'robot'"),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "text", "media_type": "text/plain", "data": "x"},
                        }
                    ],
                }
            ]
        },
        "'document'",
    ),
    ({"messages": [{"role": "user", "content": [{"type": "hologram"}]}]}, "'hologram'"),
    ({"max_tokens": 0}, "at least 1"),
    ({"max_tokens": None}, "max_tokens is required"),
    ({"temperature": "hot"}, "temperature"),
    ({"model": None}, "model"),
]


def _refused(send: Any, body: dict[str, Any], word: str) -> None:
    try:
        send(body)
    except anthropic.BadRequestError as error:
        answer: Any = error.body
        assert answer["type"] == "error", answer
        assert answer["error"]["type"] == "invalid_request_error", answer
        assert word in answer["error"]["message"], (word, answer)
    else:
        raise AssertionError(f"{body} was not refused")


def malformed_requests_refused(claude: anthropic.Anthropic, model: str) -> None:
    """Each of :data:`MALFORMED` (``None``: the field left out) is Anthropic's 400
    ``invalid_request_error``, on ``/v1/messages`` and on ``count_tokens`` (which takes no
    ``max_tokens``). The bodies are sent as they are: the SDK's types would refuse some."""
    for request, word in MALFORMED:
        body = {"model": model, "max_tokens": 8, "messages": user("Hi"), **request}
        body = {k: v for k, v in body.items() if v is not None}
        _refused(lambda b: claude.post("/v1/messages", body=b, cast_to=Message), body, word)
        if "max_tokens" not in request:
            body.pop("max_tokens")
            _refused(
                lambda b: claude.post("/v1/messages/count_tokens", body=b, cast_to=Message),
                body,
                word,
            )


def count_tokens_match_usage(claude: anthropic.Anthropic, model: str) -> list[Usage]:
    """``count_tokens`` counts the whole prompt; an answer's ``input_tokens`` leaves out
    the prompt tokens read from the engine's cache (``cache_read_input_tokens``), so the
    two add up to the count. The same prompt is asked twice; the usages are returned."""
    ask: dict[str, Any] = {"model": model, "system": "Be brief.", "messages": user(COUNTING)}
    counted = claude.messages.count_tokens(**ask).input_tokens
    usages = [claude.messages.create(max_tokens=2, **ask).usage for _ in range(2)]
    for usage in usages:
        assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == counted, (
            usage,
            counted,
        )
    return usages


RESPONSES_CHECKS = (
    responses_stream_completes,
    responses_cut_is_incomplete,
    responses_echo_the_request,
)
MESSAGES_CHECKS = (
    messages_stream,
    stop_sequences_cut,
    max_tokens_cut,
    malformed_requests_refused,
    count_tokens_match_usage,
)
