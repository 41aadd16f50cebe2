"""Messages and Responses as their SDKs expect, on llama-server: lemoncore translates both
to its chat completions (llama-server's own do not match the APIs; see ``ENDPOINTS`` in
``lemon_plugin_llamacpp/recipe.py``). The SDK code is the one the chat-only echo engine
answers in ``tests/test_translated_echo.py`` (``tests/sdk_surfaces.py``), plus what needs a
real model: structured output through llama-server's grammar, and its prompt cache in
Anthropic's usage."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from lemoncore.plugin import ServerProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))  # the shared checks
import sdk_surfaces

DEFAULT = "SmolLM2-135M-Instruct-GGUF"
PERSON = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "age"],
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
}


@pytest.fixture(scope="module")
def gpt(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api, api_key="none", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def claude(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0) as client:
        yield client


@pytest.mark.parametrize("check", sdk_surfaces.RESPONSES_CHECKS, ids=lambda c: c.__name__)
def test_responses(check: Callable[[openai.OpenAI, str], None], gpt: openai.OpenAI) -> None:
    check(gpt, DEFAULT)


@pytest.mark.parametrize("check", sdk_surfaces.MESSAGES_CHECKS, ids=lambda c: c.__name__)
def test_messages(
    check: Callable[[anthropic.Anthropic, str], Any], claude: anthropic.Anthropic
) -> None:
    check(claude, DEFAULT)


@pytest.mark.parametrize(
    "fmt",
    [
        {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True},
        {"type": "json_object"},
    ],
    ids=["json_schema", "json_object"],
)
def test_a_text_format_makes_the_answer_json(fmt: dict[str, Any], gpt: openai.OpenAI) -> None:
    """``text.format`` reaches llama-server as ``response_format``, which it turns into a
    grammar (server-common.cpp, oaicompat_chat_params_parse), so the answer is the JSON
    alone: SmolLM2 left alone writes prose around a fenced block. A schema bounds the
    answer; a bare JSON object does not, and SmolLM2 may fill the budget inside a string
    (it did in CI, with the prompt cache of the earlier tests): then the answer is cut
    (``incomplete``), still JSON from its first character."""
    answer = gpt.responses.create(
        model=DEFAULT,
        input="Describe a person: name and age.",
        max_output_tokens=64,
        temperature=0,
        text={"format": fmt},
    )  # type: ignore[typeddict-item]
    text = answer.output_text
    assert text.lstrip().startswith("{") and "```" not in text, text
    if fmt["type"] == "json_object" and answer.status == "incomplete":
        assert answer.incomplete_details is not None
        assert answer.incomplete_details.reason == "max_output_tokens"
    else:
        assert answer.status == "completed", text
        value = json.loads(text)
        assert isinstance(value, dict)
        if fmt["type"] == "json_schema":
            assert set(value) == {"name", "age"}
            assert isinstance(value["name"], str) and isinstance(value["age"], int)
    assert answer.text is not None and answer.text.format is not None
    assert answer.text.format.type == fmt["type"]


def test_usage_leaves_out_what_the_prompt_cache_read(claude: anthropic.Anthropic) -> None:
    """llama-server reuses a repeated prompt from its cache (``cached_tokens``), which
    Anthropic's usage counts as ``cache_read_input_tokens``, not ``input_tokens``: the
    two add up to ``count_tokens`` (checked in the shared check), and the cache is real."""
    first, again = sdk_surfaces.count_tokens_match_usage(claude, DEFAULT)
    assert (again.cache_read_input_tokens or 0) > 0, again
    assert again.input_tokens < first.input_tokens + (first.cache_read_input_tokens or 0)


def test_a_matched_stop_sequence_is_named(claude: anthropic.Anthropic, gpt: openai.OpenAI) -> None:
    """The plugin asks llama-server for the stop word of a translated Messages request
    (``lemon_plugin_llamacpp.stopword``), so the answer says ``stop_sequence`` and which,
    streamed and not; an OpenAI-surface answer with ``stop`` carries no ``__verbose``."""
    cut, streamed = sdk_surfaces.stop_sequences_cut(claude, DEFAULT)
    assert cut.stop_reason == streamed.stop_reason == "stop_sequence", (cut, streamed)
    assert cut.stop_sequence and cut.stop_sequence == streamed.stop_sequence
    chat = gpt.chat.completions.create(
        model=DEFAULT,
        messages=[{"role": "user", "content": sdk_surfaces.COUNTING}],
        stop=[cut.stop_sequence],
        max_tokens=48,
    )
    assert "__verbose" not in (chat.model_extra or {}), chat
