"""``lemon bench`` on reasoning models (issue #36): real HTTP streams shaped like
llama-server's with ``--reasoning-format deepseek`` (``delta.reasoning_content`` first,
then ``delta.content``, then a usage chunk). The think-then-answer stream comes from
lemoncore's echo engine, a real process imitating that parse of ``<think>``; the shapes
it does not make (usage with ``reasoning_tokens``, ``timings``, ``delta.reasoning``, tool
calls, an engine that counts tokens it never streams) from a scripted server here. TTFT is
to the first token of any kind, thinking and answer are counted apart, a budget the
thinking spent is said, and a stream with no token is refused, never a number."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.bench import (
    DEFAULT_MAX_TOKENS,
    THINK_MAX_TOKENS,
    Refused,
    Sample,
    budget,
    spread,
    stream_once,
    summary,
    token_counts,
    token_kinds,
)
from lemoncore.cli import main
from lemoncore.cli.measure import bench_notes, unmeasured
from lemoncore.testing import ServerProcess

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
import ui_support
from ui_support import THINKS, chat_server

THOUGHT = [f"thought{i}" for i in range(12)]
REPLY = [f"answer{i}" for i in range(6)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def thinker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The echo engine serving a reasoning model as ``llama-server --reasoning-format
    deepseek`` would: its answer is ``<think> THOUGHT </think> REPLY``. Its API URL."""
    words = tmp_path_factory.mktemp("thinker") / "thinks.txt"
    words.write_text(" ".join(["<think>", *THOUGHT, "</think>", *REPLY]), encoding="utf-8")
    port = free_port()
    argv = [sys.executable, "-m", "lemoncore.echo_engine", "--model", str(words)]
    argv += ["--alias", "thinker", "--port", str(port), "--reasoning-format", "deepseek"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as engine:
        try:
            assert engine.stdout is not None
            ready = engine.stdout.readline()  # printed once it listens; "" if it exited
            assert "serving thinker" in ready, (ready, engine.poll())
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            engine.terminate()
            engine.wait(30)


def once(api: str, max_tokens: int, model: str = "thinker") -> Sample:
    with httpx.Client(timeout=60) as client:
        return stream_once(client, api, model, "Tell me a story.", max_tokens)


def test_thinking_then_answer_is_timed_from_the_first_thinking_token(thinker: str) -> None:
    """The stream's first tokens are thinking: TTFT is to them (positive, not minus the
    clock), decode counts every token, and thinking and answer are counted apart from
    the stream (the engine's usage has no ``reasoning_tokens``)."""
    sample = once(thinker, 100)
    assert 0 < sample.ttft_s < 30
    assert sample.decode_tps > 0 and sample.prompt_tps > 0
    assert (sample.thinking_tokens, sample.answer_tokens) == (len(THOUGHT), len(REPLY))
    assert sample.counted_from == "stream"
    assert sample.finish_reason == "stop" and not sample.exhausted_by_thinking


def test_a_budget_spent_thinking_is_measured_and_flagged(thinker: str) -> None:
    """max_tokens 6: ``<think>`` and five words of thinking, no answer (as a reasoning
    model at the old default budget): still a measurement, flagged as such."""
    sample = once(thinker, 6)
    assert 0 < sample.ttft_s < 30 and sample.decode_tps > 0
    assert (sample.thinking_tokens, sample.answer_tokens) == (5, 0)
    assert sample.finish_reason == "length" and sample.exhausted_by_thinking


def test_a_stream_with_no_token_is_refused(thinker: str) -> None:
    """max_tokens 1 is spent on ``<think>``, which streams nothing (as llama-server's
    parse): no TTFT, no decode rate, a refusal that says what the server counted."""
    with pytest.raises(Refused) as refused:
        once(thinker, 1)
    reason = str(refused.value)
    assert reason.startswith("no token arrived from thinker (max_tokens 1, finish_reason length)")
    assert "the sample is refused" in reason
    assert "the server counted 1 completion tokens but streamed none" in reason


class Scripted(BaseHTTPRequestHandler):
    """Streams :attr:`events` (SSE, then ``[DONE]``) to any POST, an event a write."""

    protocol_version = "HTTP/1.0"
    events: Sequence[dict[str, Any]] = ()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in self.events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def scripted(events: Sequence[dict[str, Any]]) -> Iterator[str]:
    """A real HTTP server streaming ``events`` to every chat request: its API URL."""
    handler = type("Bound", (Scripted,), {"events": events})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """A llama-server chat chunk (b11434's fields)."""
    return {
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": 1760000000,
        "id": "chatcmpl-scripted",
        "model": "m",
        "system_fingerprint": "b11434-0000000",
        "object": "chat.completion.chunk",
    }


def usage_chunk(completion: int, reasoning: int | None = None) -> dict[str, Any]:
    """llama-server's last chunk (no choices; its usage and ``timings``), with OpenAI's
    ``completion_tokens_details.reasoning_tokens`` when ``reasoning`` is given."""
    usage: dict[str, Any] = {
        "completion_tokens": completion,
        "prompt_tokens": 14,
        "total_tokens": 14 + completion,
    }
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    timings = {"prompt_n": 14, "prompt_ms": 6.2, "predicted_n": completion}
    return {**chunk({}), "choices": [], "usage": usage, "timings": timings}


def reasoned(key: str, thought: int, said: int, finish: str = "stop") -> list[dict[str, Any]]:
    """Role, ``thought`` thinking pieces under ``key``, ``said`` answer pieces, the finish."""
    return [
        chunk({"role": "assistant", "content": None}),
        *(chunk({key: f" t{i}"}) for i in range(thought)),
        *(chunk({"content": f" a{i}"}) for i in range(said)),
        chunk({}, finish),
    ]


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_thinking_under_either_name_is_counted_from_the_stream(key: str) -> None:
    with scripted([*reasoned(key, 7, 3), usage_chunk(12)]) as api:
        sample = once(api, 96, "m")
    assert sample.ttft_s > 0 and sample.prompt_tps > 0
    assert (sample.thinking_tokens, sample.answer_tokens, sample.counted_from) == (7, 3, "stream")


def test_the_servers_reasoning_token_count_is_preferred() -> None:
    """usage's ``reasoning_tokens`` counts what the stream's pieces cannot (a piece may
    be several tokens; ``</think>`` is a token not streamed)."""
    with scripted([*reasoned("reasoning_content", 7, 3), usage_chunk(20, 15)]) as api:
        sample = once(api, 96, "m")
    assert (sample.thinking_tokens, sample.answer_tokens, sample.counted_from) == (15, 5, "usage")


def test_a_tool_call_is_an_answer_token() -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f"}}
    events = [*reasoned("reasoning_content", 2, 0)[:-1], chunk({"tool_calls": [call]})]
    with scripted([*events, chunk({}, "tool_calls"), usage_chunk(4)]) as api:
        sample = once(api, 96, "m")
    assert (sample.thinking_tokens, sample.answer_tokens) == (2, 1)
    assert not sample.exhausted_by_thinking


def test_an_engine_that_streams_no_thinking_and_no_content_is_refused() -> None:
    """As Halogen does when thinking spends the budget: a role, an empty content, the
    finish for length, usage counting tokens it never streamed."""
    events = [chunk({"role": "assistant", "content": ""}), chunk({"content": ""}, "length")]
    with scripted([*events, usage_chunk(96)]) as api, pytest.raises(Refused) as refused:
        once(api, 96, "m")
    assert "finish_reason length" in str(refused.value)
    assert "counted 96 completion tokens but streamed none" in str(refused.value)


def test_token_kinds_and_counts() -> None:
    assert token_kinds({"role": "assistant", "content": None}) == ()
    assert token_kinds({"content": ""}) == ()
    assert token_kinds({"reasoning_content": "x", "content": "y"}) == ("thinking", "answer")
    # a zero the streamed thinking contradicts is not the server's count
    zero = {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 0}}
    assert token_counts(6, 3, zero) == (6, 3, "stream")
    assert token_counts(0, 9, zero) == (0, 9, "usage")
    assert token_counts(6, 3, {"completion_tokens": 9}) == (6, 3, "stream")


def test_the_budget() -> None:
    assert budget(None, False) == DEFAULT_MAX_TOKENS == 96  # non-reasoning: as before
    assert budget(None, True) == THINK_MAX_TOKENS
    assert budget(32, True) == budget(32, False) == 32


def test_a_run_counts_its_refused_and_exhausted_samples() -> None:
    spent = Sample(0.1, 50.0, 100.0, 96, 0, "stream", "length", exhausted_by_thinking=True)
    run = summary([spent, Refused("no token arrived from m")])
    assert run["ttft_ms"] == spread([100.0])
    assert (run["exhausted_by_thinking"], run["refused"]) == (1, ["no token arrived from m"])
    report: dict[str, object] = {"m": {"short": run, "cold": summary([Refused("none")])}}
    assert unmeasured(report) == ["m cold"]
    notes = bench_notes(report, 96, think=False)
    assert notes[0].startswith("m short: thinking spent the whole budget (96 tokens) in 1 of 2")
    assert notes[0].endswith("--think or a larger --max-tokens")
    # a run all refused says so in its row, not in a note
    assert notes[1:] == ["m short: 1 of 2 samples refused: no token arrived from m"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A lemoncore server whose :data:`~ui_support.THINKS` model (the echo engine with
    ``--reasoning-format deepseek``) answers ``<think> THOUGHT </think> REPLY``."""
    with chat_server(tmp_path_factory.mktemp("bench")) as running:
        yield running


def lemon_bench(
    server: ServerProcess, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[int, str]:
    status = main(["bench", THINKS, "--reps", "1", *flags, "--server", server.url])
    return status, capsys.readouterr().out


def test_lemon_bench_says_the_thinking_spent_the_budget(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = lemon_bench(server, capsys, "--warm-only", "--max-tokens", "6")
    assert status == 0, out
    rows = [line.split() for line in out.splitlines() if line.startswith(THINKS)]
    assert [(row[1], row[5]) for row in rows if row[1] in {"short", "long"}] == [
        ("short", "5/0"),
        ("long", "5/0"),
    ], out
    for run in ("short", "long"):
        assert (
            f"note: {THINKS} {run}: thinking spent the whole budget (6 tokens) in 1 of 1 samples"
        ) in out


def test_lemon_bench_think_reaches_the_answer(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = lemon_bench(server, capsys, "--think", "--json")
    assert status == 0, out
    report = json.loads(out)[THINKS]
    for run in ("short", "long", "cold"):
        figures = report[run]
        assert figures["thinking_tokens"]["p50"] == len(ui_support.THOUGHT.split())
        assert figures["answer_tokens"]["p50"] == len(ui_support.REPLY.split())
        assert figures["exhausted_by_thinking"] == 0 and figures["refused"] == []
        assert figures["ttft_ms"]["p50"] > 0 and figures["decode_tps"]["p50"] > 0


def test_lemon_bench_refuses_a_run_with_no_token(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = lemon_bench(server, capsys, "--warm-only", "--max-tokens", "1")
    assert status == 1, out
    for run in ("short", "long"):
        assert f"{THINKS:<40} {run:<6} refused: no token arrived from {THINKS}" in out, out


def test_the_help_names_the_budgets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"(default {DEFAULT_MAX_TOKENS}; {THINK_MAX_TOKENS} with --think)" in shown
    assert f"a budget of {THINK_MAX_TOKENS} tokens" in shown
