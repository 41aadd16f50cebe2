"""llama.cpp's models behind lemoncore's endpoints, with the clients people use: the
anthropic SDK (Messages, streaming, token counting, errors) and the openai SDK's
Responses, which lemoncore translates to llama-server's chat completions (its own do not
match the APIs: ``ENDPOINTS`` in ``recipe.py``; more in ``test_translated_surfaces.py``),
and llama.cpp's own tokenize/detokenize and rerank. SmolLM2 is no reranker: the rerank
test checks the answer's shape only."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from lemoncore.plugin import ServerProcess

DEFAULT = "SmolLM2-135M-Instruct-GGUF"


@pytest.fixture
def claude(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0) as client:
        yield client


def test_anthropic_messages_with_a_system_prompt_and_stop_sequences(
    claude: anthropic.Anthropic,
) -> None:
    message = claude.messages.create(
        model=DEFAULT,
        max_tokens=12,
        system="Be brief.",
        messages=[{"role": "user", "content": "Say hello."}],
        stop_sequences=["\n\n"],
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in {"end_turn", "max_tokens", "stop_sequence"}
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 12


def test_anthropic_streaming_and_token_counting(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model=DEFAULT, max_tokens=8, messages=[{"role": "user", "content": "Count to five."}]
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text and final.content[0].text == text  # type: ignore[union-attr]
    counted = claude.messages.count_tokens(
        model=DEFAULT, messages=[{"role": "user", "content": "Count to five."}]
    )
    # input_tokens leaves out what llama-server's prompt cache read (Anthropic's meaning)
    usage = final.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)


def test_anthropic_errors_are_anthropic_shaped(
    claude: anthropic.Anthropic, server: ServerProcess
) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(
            model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "Hi"}]
        )
    assert missing.value.body == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": "model 'no-such-model' not found; list models with GET /v1/models",
        },
    }
    bad = httpx.post(server.url + "/v1/messages", json={"model": DEFAULT, "max_tokens": 4})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"


def test_openai_responses_streaming_and_not(server: ServerProcess) -> None:
    with openai.OpenAI(base_url=server.api, api_key="none", max_retries=0) as client:
        answer = client.responses.create(
            model=DEFAULT, input="Say hi.", max_output_tokens=16, instructions="Be brief."
        )
        with client.responses.create(
            model=DEFAULT,
            input="Say hello in one word.",
            max_output_tokens=256,  # SmolLM2's greedy answer is ~30 tokens, 64+ on some runs
            temperature=0,
            stream=True,
        ) as stream:
            events = [e.type for e in stream]
        with client.responses.create(
            model=DEFAULT, input="Tell a long story.", max_output_tokens=4, stream=True
        ) as stream:
            cut = [e.type for e in stream]
    assert answer.output_text and answer.usage is not None and answer.usage.input_tokens > 0
    assert events[0] == "response.created" and events[-1] == "response.completed"
    assert "response.output_text.delta" in events
    assert cut[-1] == "response.incomplete"  # llama-server's own said "completed"


def test_tokenize_round_trip(server: ServerProcess) -> None:
    tokens = httpx.post(
        server.url + "/tokenize", json={"model": DEFAULT, "content": "Hello there"}
    ).json()
    text = httpx.post(server.url + "/detokenize", json={"model": DEFAULT, **tokens}).json()[
        "content"
    ]
    assert tokens["tokens"] and text.strip() == "Hello there"


def test_rerank_answers_in_its_shape(server: ServerProcess, register: object) -> None:
    register(server, "smol-rerank", ("reranking",))  # type: ignore[operator]
    answer = httpx.post(
        server.url + "/v1/rerank",
        timeout=60,
        json={"model": "smol-rerank", "query": "colour", "documents": ["red", "a cat"]},
    )
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert sorted(r["index"] for r in results) == [0, 1]
    assert all(isinstance(r["relevance_score"], float) for r in results)
