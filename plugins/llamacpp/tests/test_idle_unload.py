"""Idle unload (``keep_alive``) against a real server running real llama-server processes:
the server-wide default, a per-model setting, a load's and a request's ``keep_alive``."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import httpx

from lemoncore.plugin import ServerProcess

TTL = 2.0  # the default keep_alive of the idle_server fixture (conftest.py)


def loaded(server: ServerProcess) -> dict[str, dict[str, object]]:
    health = httpx.get(server.url + "/api/v1/health").json()
    return {m["model_name"]: m for m in health["all_models_loaded"]}


def chat(server: ServerProcess, model: str, **extra: object) -> None:
    httpx.post(
        server.api + "/chat/completions",
        timeout=60,
        json={
            "model": model,
            "max_tokens": 4,
            **extra,
            "messages": [{"role": "user", "content": "Hi"}],
        },
    ).raise_for_status()


def wait_unloaded(server: ServerProcess, model: str, within: float) -> float:
    """Seconds until ``model`` is no longer loaded; fails after ``within``."""
    began = time.monotonic()
    while model in loaded(server):
        assert time.monotonic() - began < within, f"{model} still loaded after {within} s"
        time.sleep(0.05)
    return time.monotonic() - began


def idle_pass(server: ServerProcess) -> None:
    """Return once the idle unloader has decided more than ``TTL`` after now: ``a``, used
    now with the default keep_alive, is unloaded by that decision, which left loaded any
    model it found idle at least that long and kept (one that was not kept would have been
    due, and unloaded, first)."""
    chat(server, "a")
    wait_unloaded(server, "a", TTL + 5)


def idle_evictions(server: ServerProcess) -> int:
    metrics = httpx.get(server.url + "/metrics").text
    return int(
        next(
            line.rsplit(" ", 1)[1]
            for line in metrics.splitlines()
            if line.startswith('lemon_evictions_total{reason="idle"}')
        )
    )


def test_an_idle_model_is_unloaded_after_the_default_keep_alive(idle_server: ServerProcess) -> None:
    before = idle_evictions(idle_server)
    chat(idle_server, "a")
    entry = loaded(idle_server)["a"]
    assert entry["keep_alive"] == TTL
    assert isinstance(unload_in := entry["unload_in_seconds"], float) and 0 < unload_in <= TTL
    waited = wait_unloaded(idle_server, "a", TTL + 5)
    assert waited >= TTL - unload_in - 0.5  # not before its time
    assert idle_evictions(idle_server) == before + 1
    assert "idle for 2 s; its keep_alive is 2 s" in idle_server.log()


def test_a_model_is_not_unloaded_while_it_generates(idle_server: ServerProcess) -> None:
    seen: list[dict[str, object]] = []
    stop = threading.Event()

    def watch() -> None:  # what /health says while the answer is generated
        while not stop.is_set():
            seen.append(loaded(idle_server).get("b", {}))
            time.sleep(0.25)

    # llama-server's ignore_eos: an answer of 400 tokens, ~3 s here, over keep_alive 1 s
    body = {
        "model": "b",
        "prompt": "Once upon a time",
        "max_tokens": 400,
        "ignore_eos": True,
        "stream": True,
        "keep_alive": 1,
    }
    began = time.monotonic()
    with httpx.stream("POST", idle_server.api + "/completions", json=body, timeout=300) as answer:
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            lines = [line for line in answer.iter_lines() if line.startswith("data: ")]
        finally:
            stop.set()
            watcher.join()
    took = time.monotonic() - began
    assert lines[-1] == "data: [DONE]" and took > 1.5, took  # longer than keep_alive
    assert seen and all(s.get("status") == "busy" for s in seen[:-1])  # never unloaded
    wait_unloaded(idle_server, "b", 6)


def test_a_request_and_a_load_set_keep_alive(idle_server: ServerProcess) -> None:
    chat(idle_server, "c", keep_alive=0)  # unloaded as soon as the answer is complete
    assert wait_unloaded(idle_server, "c", 3) < 1.5
    chat(idle_server, "c", keep_alive=-1)  # kept from now on
    assert loaded(idle_server)["c"]["keep_alive"] is None
    idle_pass(idle_server)  # c, idle for longer than the default keep_alive, stays
    assert "c" in loaded(idle_server)
    for keep_alive in ("1m", "1s"):
        answer = httpx.post(
            idle_server.url + "/api/v1/load", json={"model_name": "c", "keep_alive": keep_alive}
        )
        assert answer.status_code == 200, answer.text
        if keep_alive == "1m":  # lemon ps says when
            ps = subprocess.run(
                [sys.executable, "-m", "lemoncore.cli", "ps", "--server", idle_server.url],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert re.search(r"UNLOADS.*\n.*\bin \d+ s\b", ps.stdout), ps.stdout + ps.stderr
    wait_unloaded(idle_server, "c", 4)
    # keep_alive 0 on a load: kept until its next answer, then unloaded
    answer = httpx.post(idle_server.url + "/api/v1/load", json={"model_name": "c", "keep_alive": 0})
    assert answer.status_code == 200, answer.text
    chat(idle_server, "a", keep_alive=0)  # the unloader decides again after a's answer,
    wait_unloaded(idle_server, "a", 3)  # unloads a, and keeps c
    assert "c" in loaded(idle_server)
    chat(idle_server, "c")
    assert wait_unloaded(idle_server, "c", 3) < 1.5
    bad = httpx.post(
        idle_server.api + "/chat/completions",
        json={"model": "c", "keep_alive": "soon", "messages": [{"role": "user", "content": "Hi"}]},
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "keep_alive"
    assert "duration" in bad.json()["error"]["message"]


def test_a_model_setting_overrides_the_default(idle_server: ServerProcess) -> None:
    chat(idle_server, "kept")
    assert loaded(idle_server)["kept"]["keep_alive"] is None  # model_keep_alive: -1
    assert loaded(idle_server)["kept"]["unload_in_seconds"] is None
    idle_pass(idle_server)
    assert "kept" in loaded(idle_server)
