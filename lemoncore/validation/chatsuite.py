"""The chat checks of the conformance kit: :class:`ChatConformance`, the test class a
backend that serves ``/v1/chat/completions`` subclasses (through
:mod:`lemoncore.conformance`): :class:`~.suite.BackendConformance`'s checks and OpenAI's
chat and completions shapes, streaming, ``include_usage`` and the served model's name
in every answer and chunk."""

from __future__ import annotations

import json
from typing import Any, ClassVar, TypedDict

import httpx

from lemoncore.validation.answers import expect, json_body, post, quoted
from lemoncore.validation.declared import declared
from lemoncore.validation.suite import BackendConformance, skip
from lemoncore.validation.target import ConformanceTarget


class Usage(TypedDict):
    """An answer's ``usage``, as the kit reads it."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def _usage_adds_up(usage: Usage, said: str) -> None:
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0, said
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], said


class ChatConformance(BackendConformance):
    """The kit for a chat backend: subclass this (its name must start with ``Test``)."""

    CHAT_KIT: ClassVar[bool] = True
    MESSAGES: ClassVar[list[dict[str, str]]] = [
        {"role": "user", "content": "Count from one to five."}
    ]

    def _chat(self, target: ConformanceTarget, **extra: Any) -> dict[str, Any]:
        body = {"model": target.model, "messages": self.MESSAGES, "max_tokens": 8, **extra}
        answer = post(target, "/v1/chat/completions", json=body)
        return json_body(answer, target)

    def _stream(self, target: ConformanceTarget, **extra: Any) -> list[str]:
        body = {
            "model": target.model,
            "messages": self.MESSAGES,
            "max_tokens": 8,
            "stream": True,
            **extra,
        }
        url = target.server.api + "/chat/completions"
        with httpx.stream("POST", url, timeout=120, json=body) as response:
            expect(response, 200, target, "a streamed chat")
            kind = response.headers.get("content-type", "")
            if not kind.startswith("text/event-stream"):
                response.read()
                raise AssertionError(f"not an event stream ({kind}); {quoted(response, target)}")
            return [line[6:] for line in response.iter_lines() if line.startswith("data: ")]

    def test_chat_completion_shape_and_usage(self, conformance_target: ConformanceTarget) -> None:
        body = self._chat(conformance_target)
        said = f"the answer: {json.dumps(body)[:500]}"
        assert body.get("object") == "chat.completion", said
        choice = body["choices"][0]
        assert choice["message"]["role"] == "assistant", said
        content = choice["message"]["content"]
        assert isinstance(content, str) and content, said
        assert choice["finish_reason"] in {"stop", "length"}, said
        _usage_adds_up(body["usage"], said)

    def test_streaming_chunks_end_with_done(self, conformance_target: ConformanceTarget) -> None:
        data = self._stream(conformance_target)
        said = f"the stream's data: {data[-6:]}"
        assert data and data[-1] == "[DONE]", said
        chunks = [json.loads(d) for d in data[:-1]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks), said
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
        )
        assert text, said
        assert not any("total_tokens" in (c.get("usage") or {}) for c in chunks), said
        assert any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks), said

    def test_include_usage_adds_a_usage_chunk(self, conformance_target: ConformanceTarget) -> None:
        data = self._stream(conformance_target, stream_options={"include_usage": True})
        said = f"the stream's data: {data[-4:]}"
        assert len(data) >= 2, said
        last = json.loads(data[-2])
        assert last["choices"] == [], said
        _usage_adds_up(last["usage"], said)

    def test_answers_name_the_served_model(self, conformance_target: ConformanceTarget) -> None:
        """lemoncore passes the engine's answers through: their ``model`` must be the
        name the client asked for, which the launch must give the engine (llama-server:
        ``--alias <model.name>``)."""
        name = conformance_target.model
        fix = (
            "the engine reports model {!r}, not the served name {!r}: make the launch "
            "give the engine the model's name (llama-server: --alias model.name)"
        )
        answered = self._chat(conformance_target).get("model")
        assert answered == name, fix.format(answered, name)
        data = self._stream(conformance_target, stream_options={"include_usage": True})
        streamed = {json.loads(d).get("model") for d in data[:-1]}
        assert streamed == {name}, fix.format(sorted(map(str, streamed - {name})), name)

    def test_completions_shape(self, conformance_target: ConformanceTarget) -> None:
        target = conformance_target
        if not target.completions or "/v1/completions" not in declared(target).endpoints:
            skip("the backend declares no /v1/completions")
        body = {"model": target.model, "prompt": "One, two,", "max_tokens": 8}
        answer = json_body(post(target, "/v1/completions", json=body), target)
        said = f"the answer: {json.dumps(answer)[:500]}"
        assert answer.get("object") == "text_completion", said
        assert isinstance(answer["choices"][0]["text"], str), said
        _usage_adds_up(answer["usage"], said)
