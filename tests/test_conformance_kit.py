"""The conformance kit fails what users would notice and says what it saw: a backend
whose answers name another model than the one served (lemoncore passes answers through
unchanged); a chat backend tested without the chat checks; an answer it did not expect,
quoted with its status, body and, on a 503, the engine's last lines. Which of its checks
``lemon validate`` runs follows what the backend declares."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lemoncore.conformance import (
    BackendConformance,
    ChatConformance,
    ConformanceTarget,
    field_checks,
)
from lemoncore.testing import running_server
from lemoncore.validation.answers import BODY_CHARS, post

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, SCRIPT, tiny_plugin

CHAT_ONLY = {
    "chat_completion_shape_and_usage",
    "streaming_chunks_end_with_done",
    "include_usage_adds_a_usage_chunk",
    "answers_name_the_served_model",
    "completions_shape",
}


@contextmanager
def tiny_target(cache: Path, *args: str) -> Iterator[ConformanceTarget]:
    with running_server(cache, command=(str(SCRIPT),), args=args) as server:
        yield ConformanceTarget(
            server, MODEL, "tiny:cpu", plugins={"tiny": tiny_plugin(cache)}, plugins_allow=[]
        )


def test_the_kit_fails_a_backend_that_reports_another_model(tmp_path: Path) -> None:
    with tiny_target(tmp_path, "--engine-name", "-") as target:
        with pytest.raises(
            AssertionError,
            match=r"the engine reports model '-', not the "
            r"served name 'tiny-chat': make the launch give the engine",
        ):
            ChatConformance().test_answers_name_the_served_model(target)
        with pytest.raises(AssertionError, match=r"/v1/chat/completions: the engine reports"):
            ChatConformance().test_every_endpoint_the_backend_serves_answers(target)


def test_a_chat_backend_on_backend_conformance_fails_the_guard(tmp_path: Path) -> None:
    """Staying on BackendConformance would silently drop the chat checks: it fails,
    saying which class to subclass; on ChatConformance the same check passes."""
    with tiny_target(tmp_path) as target:
        with pytest.raises(
            AssertionError,
            match=r"tiny:cpu serves /v1/chat/completions: "
            r"subclass lemoncore.conformance.ChatConformance",
        ):
            BackendConformance().test_chat_backends_run_the_chat_kit(target)
        ChatConformance().test_chat_backends_run_the_chat_kit(target)


def test_the_chat_checks_run_in_the_field_only_for_a_backend_that_serves_chat() -> None:
    speech = {c.name for c in field_checks({"/v1/audio/speech"})}
    chat = {c.name for c in field_checks({"/v1/chat/completions", "/v1/completions"})}
    assert not CHAT_ONLY & speech
    assert CHAT_ONLY <= chat and speech <= chat
    assert {
        "errors_are_shaped_like_the_endpoint",
        "ready_means_the_engine_answers",
        "every_endpoint_the_backend_serves_answers",
        "a_crashed_engine_is_loaded_again",
    } <= speech
    # the plugin's CI checks its code (owner dispatch) and its test class (the guard)
    assert not {"owner_hooks_reach_only_the_backend_owner", "chat_backends_run_the_chat_kit"} & chat
    assert {c.name for c in field_checks()} == chat  # no endpoints given: a chat backend's


@dataclass
class StandIn:
    """A server that answers every POST with ``status`` and ``body`` and serves
    ``lines`` as the model's backend lines on ``/api/v1/logs``."""

    url: str

    @property
    def api(self) -> str:
        return self.url + "/v1"


@contextmanager
def stand_in(status: int, body: object, lines: tuple[str, ...] = ()) -> Iterator[StandIn]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def send(self, code: int, data: object) -> None:
            raw = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send(status, body)

        def do_GET(self) -> None:
            entries = [
                {"source": "backend", "event": "engine output", "fields": {"line": x}}
                for x in lines
            ]
            self.send(200, {"data": entries, "last": len(entries), "live": True})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield StandIn(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


def test_a_failure_quotes_the_status_and_the_start_failures_engine_lines() -> None:
    message = (
        "m: backend exited with code 2 while starting.\nLast output:\n"
        "loading voice\nerror: no voice 'xx'\n"
        "(m failed to start 3 times in a row: held off for 5 s; an explicit load retries now)"
    )
    error = {"error": {"message": message, "type": "model_load_error"}}
    with stand_in(503, error, ("not these",)) as server:
        target = ConformanceTarget(server, "m", "r:b")
        with pytest.raises(AssertionError) as failed:
            post(target, "/v1/audio/speech", json={"model": "m", "input": "hi"})
    said = str(failed.value)
    assert "expected 200; POST /v1/audio/speech answered 503: " in said
    assert "backend exited with code 2 while starting" in said
    tail = said.split("-- the engine's last lines --\n", 1)[1]
    assert tail == "loading voice\nerror: no voice 'xx'"


def test_a_503_without_the_lines_quotes_the_engines_log_and_a_long_body_is_cut() -> None:
    error = {"error": {"message": "busy " + "x" * 2000, "type": "server_error"}}
    with stand_in(503, error, ("first", "Segmentation fault")) as server:
        target = ConformanceTarget(server, "m", "r:b")
        with pytest.raises(AssertionError) as failed:
            post(target, "/v1/x", json={})
    said = str(failed.value)
    body = said.split("answered 503: ", 1)[1].split("... (", 1)[0]
    assert len(body) == BODY_CHARS and body.startswith('{"error": {"message": "busy xx')
    assert said.endswith("-- the engine's last lines --\nfirst\nSegmentation fault")


def test_another_status_quotes_the_body_and_no_engine_lines() -> None:
    with stand_in(400, {"error": {"message": "input: required", "type": "x"}}, ("l",)) as server:
        with pytest.raises(AssertionError) as failed:
            post(ConformanceTarget(server, "m", "r:b"), "/v1/x", json={})
    assert str(failed.value) == (
        'expected 200; POST /v1/x answered 400: {"error": {"message": "input: required", '
        '"type": "x"}}'
    )
