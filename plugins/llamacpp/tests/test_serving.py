"""The main job end to end: the stock openai client against real llama-server processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from lemoncore.plugin import ServerProcess, running_server

DEFAULT = "SmolLM2-135M-Instruct-GGUF"
MESSAGES = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api, api_key="none", max_retries=0) as client:
        yield client


def loaded(server: ServerProcess) -> dict[str, dict[str, object]]:
    health = httpx.get(server.url + "/api/v1/health").json()
    return {m["model_name"]: m for m in health["all_models_loaded"]}


def pid_of(server: ServerProcess, name: str) -> int:
    return int(loaded(server)[name]["pid"])  # type: ignore[call-overload]


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def wait_for(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def empty(server: ServerProcess) -> Iterator[None]:
    httpx.post(server.url + "/api/v1/unload", json={}).raise_for_status()
    yield
    httpx.post(server.url + "/api/v1/unload", json={}).raise_for_status()


def test_chat_reports_usage(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=DEFAULT, messages=MESSAGES, max_tokens=16)
    assert reply.choices[0].message.content
    assert reply.model == DEFAULT
    usage = reply.usage
    assert usage is not None and 0 < usage.completion_tokens <= 16
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_chat_streams_chunk_by_chunk_with_usage_on_request(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=DEFAULT,
            messages=MESSAGES,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 2
    assert text
    usage = chunks[-1].usage
    assert usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    plain = list(
        client.chat.completions.create(model=DEFAULT, messages=MESSAGES, max_tokens=4, stream=True)
    )
    assert all(c.usage is None for c in plain)


def test_completions(client: openai.OpenAI) -> None:
    reply = client.completions.create(model=DEFAULT, prompt="Once upon a time", max_tokens=8)
    assert reply.choices[0].text
    assert reply.usage is not None
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_alias_latest_suffix_and_max_completion_tokens(client: openai.OpenAI) -> None:
    for name in ("smollm2", f"{DEFAULT}:latest"):
        reply = client.chat.completions.create(
            model=name, messages=MESSAGES, max_completion_tokens=3
        )
        assert reply.model == DEFAULT
        assert reply.usage is not None and reply.usage.completion_tokens <= 3


def test_models_lists_downloaded_and_show_all_the_catalogue(server: ServerProcess) -> None:
    ids = {m["id"] for m in httpx.get(server.api + "/models").json()["data"]}
    assert {DEFAULT, "m1", "m2", "m3"} <= ids
    assert "Qwen3-0.6B-GGUF" not in ids
    every = httpx.get(server.api + "/models", params={"show_all": "true"}).json()["data"]
    assert {"id": "Qwen3-0.6B-GGUF", "downloaded": False}.items() <= next(
        m for m in every if m["id"] == "Qwen3-0.6B-GGUF"
    ).items()


def test_lru_eviction_with_two_slots(
    server: ServerProcess, client: openai.OpenAI, empty: None
) -> None:
    for name in ("m1", "m2", "m1", "m3"):  # touching m1 makes m2 the least recently used
        client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=2)
    assert set(loaded(server)) == {"m1", "m3"}
    assert all(m["device"] == "cpu" and m["backend"] == "pypi" for m in loaded(server).values())


def test_pinned_models_are_not_evicted(
    server: ServerProcess, client: openai.OpenAI, empty: None
) -> None:
    for name in ("m1", "m2"):
        httpx.post(
            server.url + "/api/v1/load", json={"model_name": name, "pinned": True}, timeout=60
        ).raise_for_status()
    with pytest.raises(openai.ConflictError) as refused:
        client.chat.completions.create(model="m3", messages=MESSAGES, max_tokens=2)
    assert "pinned" in str(refused.value)
    assert set(loaded(server)) == {"m1", "m2"}


def test_an_idle_model_is_downsized_and_its_next_request_finds_it_ready(
    server: ServerProcess, client: openai.OpenAI, empty: None
) -> None:
    """Lemonade's downsize: a model that opted into auto-eviction and has been idle for its
    downsize_idle_timeout has every slot's KV cache erased (the same prompt is no longer
    cached); health shows it downsized until its next request. The process stays."""
    load = {"model_name": DEFAULT, "auto_evict": True, "downsize_idle_timeout": 3}
    httpx.post(server.url + "/api/v1/load", json=load, timeout=60).raise_for_status()
    pid = pid_of(server, DEFAULT)
    prompt = [{"role": "user", "content": "Tell me about the sea. " * 20}]

    def cached() -> int:
        reply = client.chat.completions.create(model=DEFAULT, messages=prompt, max_tokens=1)
        return int((reply.model_extra or {})["timings"]["cache_n"])

    cached()
    assert cached() > 100  # llama-server kept the prompt in its slot
    wait_for(lambda: loaded(server)[DEFAULT]["status"] == "downsized", 15, "the downsize")
    assert pid_of(server, DEFAULT) == pid
    assert cached() == 0  # the slots were erased
    assert loaded(server)[DEFAULT]["status"] == "ready"
    erased = httpx.post(server.url + "/api/v1/slots/0?action=erase")
    assert erased.status_code == 200 and erased.json()["id_slot"] == 0, erased.text
    saved = httpx.post(server.url + "/api/v1/slots/0?action=save", json={"filename": "a.bin"})
    assert saved.status_code == 501 and saved.json()["error"]["type"] == "not_supported_error"


def test_killed_backend_is_replaced_on_the_next_request(
    server: ServerProcess, client: openai.OpenAI, empty: None
) -> None:
    client.chat.completions.create(model="m1", messages=MESSAGES, max_tokens=2)
    old = pid_of(server, "m1")
    os.kill(old, signal.SIGKILL)
    assert gone(old)
    reply = client.chat.completions.create(model="m1", messages=MESSAGES, max_tokens=4)
    assert reply.choices[0].message.content
    assert pid_of(server, "m1") != old


def engine_get(backend_url: str, path: str, headers: dict[str, str]) -> httpx.Response:
    """GET from an engine at its ``backend_url``: ``http://host:port`` or ``unix:/path``."""
    uds = backend_url.removeprefix("unix:") if backend_url.startswith("unix:") else None
    with httpx.Client(
        base_url="http://localhost" if uds else backend_url,
        headers=headers,
        transport=httpx.HTTPTransport(uds=uds) if uds else None,
    ) as engine:
        return engine.get(path)


def generating(server: ServerProcess, name: str) -> Callable[[], bool]:
    """Whether ``name``'s engine is generating now, by its own ``/metrics`` (with the
    launch's key, as only the engine's user can read it: its environment)."""
    model = loaded(server)[name]
    environ = Path(f"/proc/{model['pid']}/environ").read_bytes().split(b"\0")
    key = next(v for k, _, v in (e.partition(b"=") for e in environ) if k == b"LLAMA_API_KEY")

    def now() -> bool:
        metrics = engine_get(
            str(model["backend_url"]), "/metrics", {"Authorization": f"Bearer {key.decode()}"}
        ).text
        return (
            next(
                line
                for line in metrics.splitlines()
                if line.startswith("llamacpp:requests_processing")
            ).split()[1]
            != "0"
        )

    return now


def test_request_hit_by_a_crash_is_retried_once(
    server: ServerProcess, client: openai.OpenAI, empty: None
) -> None:
    """The engine dies while it generates the request (killed once its own metrics say it
    is generating, not after a fixed delay a fast engine finishes within or a slow start
    has not reached): the request is answered whole by a fresh engine."""
    client.chat.completions.create(model="m1", messages=MESSAGES, max_tokens=2)
    victim = pid_of(server, "m1")
    busy = generating(server, "m1")

    def ask() -> openai.types.chat.ChatCompletion:
        return client.chat.completions.create(
            model="m1",
            messages=[{"role": "user", "content": "Write a long story."}],
            max_tokens=200,
            extra_body={"ignore_eos": True},
        )

    with ThreadPoolExecutor(1) as pool:
        asking = pool.submit(ask)
        deadline = time.monotonic() + 30
        while not busy():
            assert time.monotonic() < deadline and not asking.done(), "never generating"
            time.sleep(0.01)
        os.kill(victim, signal.SIGKILL)
        reply = asking.result()  # the client's own timeout bounds it
    assert gone(victim)
    assert reply.usage is not None and reply.usage.completion_tokens == 200
    assert pid_of(server, "m1") != victim


def sse_lines(server: ServerProcess, body: dict[str, object], on_data: object = None) -> list[str]:
    lines: list[str] = []
    with httpx.stream("POST", server.api + "/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            lines.append(line)
            if callable(on_data) and line.startswith("data: {"):
                on_data()
    return lines


def test_stream_cut_by_a_crash_ends_with_an_error_frame(server: ServerProcess, empty: None) -> None:
    body = {
        "model": "m2",
        "messages": MESSAGES,
        "max_tokens": 2000,
        "stream": True,
        "ignore_eos": True,
    }
    killed: list[int] = []

    def kill_once() -> None:
        if not killed:
            killed.append(pid_of(server, "m2"))
            os.kill(killed[0], signal.SIGKILL)

    lines = sse_lines(server, body, kill_once)
    frames = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
    assert "error" in frames[-1]
    assert frames[-1]["error"]["type"] == "backend_error"
    assert "data: [DONE]" not in lines
    assert len(frames) < 2000


def test_heartbeats_while_the_backend_is_silent(server: ServerProcess) -> None:
    prompt = " ".join(f"word{i}" for i in range(700))  # a prefill of about two seconds
    lines = sse_lines(
        server,
        {
            "model": DEFAULT,
            "max_tokens": 2,
            "stream": True,
            "messages": [{"role": "user", "content": prompt}],
        },
    )
    first_data = next(i for i, x in enumerate(lines) if x.startswith("data:"))
    assert ": ping" in lines[:first_data]
    assert lines[-2:] == ["data: [DONE]", ""] or lines[-1] == "data: [DONE]"


def test_embeddings_from_a_model_labelled_embeddings(
    server: ServerProcess, client: openai.OpenAI, register: Callable[..., None]
) -> None:
    # SmolLM2 is a chat model: serving embeddings from it needs a pooling type.
    register(server, "emb", ("embeddings",), {"llamacpp_args": "--pooling mean"})
    result = client.embeddings.create(model="emb", input=["hello", "world"])
    assert len(result.data) == 2
    assert len(result.data[0].embedding) > 16
    assert result.data[0].embedding != result.data[1].embedding
    assert loaded(server)["emb"]["type"] == "embedding"


def test_system_info_shows_backend_states(server: ServerProcess) -> None:
    info = httpx.get(server.url + "/api/v1/system-info").json()
    llamacpp = info["recipes"]["llamacpp"]
    assert llamacpp["default_backend"] == "pypi"
    assert llamacpp["backends"]["pypi"]["state"] == "installed"
    assert llamacpp["backends"]["cpu"]["state"] == "action_required"
    assert "SHA-256" in llamacpp["backends"]["cpu"]["message"]
    assert info["devices"]["cpu"]
    assert {p["name"]: p["status"] for p in info["plugins"]}["llamacpp"] == "loaded"


def test_sigterm_stops_every_child(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        httpx.post(
            server.url + "/api/v1/load", json={"model_name": DEFAULT}, timeout=60
        ).raise_for_status()
        child = pid_of(server, DEFAULT)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=15) == 0
    assert gone(child, within=1)


def test_explain_names_the_eviction_and_changes_nothing(
    server: ServerProcess, client: openai.OpenAI, empty: None
) -> None:
    for name in ("m1", "m2"):
        client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=2)
    result = subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", "explain", "m3", "--server", server.url],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "m3: llamacpp:pypi (installed) on cpu, policy standard" in result.stdout
    assert "evicts m1 [lru]" in result.stdout
    assert "least recently used" in result.stdout
    assert set(loaded(server)) == {"m1", "m2"}
