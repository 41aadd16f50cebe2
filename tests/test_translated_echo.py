"""Messages and Responses as their SDKs expect, on a chat-only engine (lemoncore's echo
engine, ``echoplugin.py``): lemoncore translates both to chat completions, the path
llama.cpp's models take too; the same SDK code runs against llama-server in
``plugins/llamacpp/tests/test_translated_surfaces.py``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from lemoncore.testing import ServerProcess, running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
import sdk_surfaces
from echoplugin import MODEL, SCRIPT, WORDS


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("echo"), command=(str(SCRIPT),)) as s:
        yield s


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
    check(gpt, MODEL)


@pytest.mark.parametrize("check", sdk_surfaces.MESSAGES_CHECKS, ids=lambda c: c.__name__)
def test_messages(
    check: Callable[[anthropic.Anthropic, str], Any], claude: anthropic.Anthropic
) -> None:
    check(claude, MODEL)


def test_the_echo_engine_names_no_stop_sequence(claude: anthropic.Anthropic) -> None:
    """It cuts at the stop string but does not say which (no ``stop_reason`` on its
    choice), so the answer says ``end_turn`` with none."""
    for answer in sdk_surfaces.stop_sequences_cut(claude, MODEL):
        assert (answer.stop_reason, answer.stop_sequence) == ("end_turn", None)


def test_a_whole_answer_is_the_engine_words(
    gpt: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    """What the checks read is the engine's answer, translated: its words, whole."""
    assert sdk_surfaces.messages_stream(claude, MODEL).content[0].text == WORDS  # type: ignore[union-attr]
    answer = gpt.responses.create(model=MODEL, input="Hi", max_output_tokens=64)
    assert answer.output_text == WORDS and answer.status == "completed"
