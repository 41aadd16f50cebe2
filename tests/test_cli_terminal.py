"""What ``lemon`` shows on a terminal, through a pty, against real server processes: a
spinner with the time elapsed while a model loads (``lemon load``, a cold ``lemon run``
until the engine answers) or downloads (``lemon pull``), and none when stderr is not a
terminal or the output is ``--json``; the interactive chat's ``/set``, ``/show`` and
``/?``; and the line ``lemon bench`` writes on stderr as each step starts. The core test
backend's engine takes 2 s to start, so a load is slow. Both servers have an API key and
a different admin key: each command sends the one its routes need."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lemoncore.testing import ServerProcess, running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
import echoplugin
from tinyplugin import MODEL, SCRIPT

START_DELAY_S = 2
KEYS = {"LEMON_API_KEY": "user-key", "LEMON_ADMIN_API_KEY": "admin-key"}  # both servers'
ELAPSED = re.compile(rb"0:00:0[1-9]")  # rich's TimeElapsedColumn, a second or more in


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    cache = tmp_path_factory.mktemp("slow")
    command = (str(SCRIPT), "--start-delay", str(START_DELAY_S))
    with running_server(cache, KEYS, command=command) as server:
        yield server


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    cache = tmp_path_factory.mktemp("echo")
    with running_server(cache, KEYS, command=(str(echoplugin.SCRIPT),)) as server:
        yield server


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("LEMON_")},
        **KEYS,
        "LEMON_CACHE_DIR": str(tmp_path),
        "LEMON_CONFIG_FILE": str(tmp_path / "config.toml"),
        "TERM": "xterm",
    }


def read(
    fd: int, seen: bytearray, until: bytes | None = None, start: int = 0, timeout: float = 60
) -> None:
    """Read the pty into ``seen`` until ``until`` is in it after ``start`` (``None``: until
    the terminal closes)."""
    deadline = time.monotonic() + timeout
    while until is None or seen.find(until, start) < 0:
        assert time.monotonic() < deadline, f"no {until!r} in {bytes(seen)!r}"
        if select.select([fd], [], [], 0.5)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: every process holding the terminal is gone
                chunk = b""
            if not chunk:
                assert until is None, f"closed with no {until!r} in {bytes(seen)!r}"
                return
            seen += chunk


def in_terminal(
    env: dict[str, str], *argv: str, stdout_too: bool = True
) -> tuple[int, bytes, bytes]:
    """``lemon ARGV…`` with a pty as stdin and stderr (and stdout, unless not
    ``stdout_too``: then a pipe); its status, what the terminal got, what the pipe got."""
    leader, follower = pty.openpty()
    lemon = subprocess.Popen(
        [sys.executable, "-m", "lemoncore.cli", *argv],
        env=env,
        stdin=follower,
        stdout=follower if stdout_too else subprocess.PIPE,
        stderr=follower,
    )
    os.close(follower)
    seen = bytearray()
    try:
        read(leader, seen)
        piped = lemon.stdout.read() if lemon.stdout else b""
        return lemon.wait(30), bytes(seen), piped
    finally:
        lemon.kill()
        if lemon.stdout:
            lemon.stdout.close()
        os.close(leader)


def test_a_slow_load_shows_a_spinner_with_the_time_elapsed(
    slow: ServerProcess, env: dict[str, str]
) -> None:
    code, terminal, _ = in_terminal(env, "load", MODEL, "--server", slow.url)
    assert code == 0, terminal
    assert b"loading tiny-chat" in terminal and ELAPSED.search(terminal), terminal
    assert terminal.rstrip().endswith(b"loaded tiny-chat on tiny:cpu (cpu)")


def test_no_spinner_in_json_output_or_when_stderr_is_not_a_terminal(
    slow: ServerProcess, env: dict[str, str]
) -> None:
    assert in_terminal(env, "unload", "--all", "--server", slow.url)[0] == 0
    code, terminal, piped = in_terminal(
        env, "load", MODEL, "--json", "--server", slow.url, stdout_too=False
    )
    assert code == 0 and terminal == b""
    assert json.loads(piped)["model_name"] == MODEL
    assert in_terminal(env, "unload", "--all", "--server", slow.url)[0] == 0
    ran = subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", "load", MODEL, "--server", slow.url],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert (ran.returncode, ran.stderr) == (0, b"")


def test_a_cold_run_shows_a_spinner_until_the_engine_answers_and_a_warm_one_none(
    slow: ServerProcess, env: dict[str, str]
) -> None:
    assert in_terminal(env, "unload", "--all", "--server", slow.url)[0] == 0
    code, cold, _ = in_terminal(env, "run", MODEL, "hi", "--server", slow.url)
    assert code == 0, cold
    assert b"loading tiny-chat" in cold and ELAPSED.search(cold), cold
    code, warm, _ = in_terminal(env, "run", MODEL, "hi", "--server", slow.url)
    assert code == 0 and b"loading" not in warm, warm


def test_a_pull_shows_the_time_elapsed(
    slow: ServerProcess, env: dict[str, str], tmp_path: Path
) -> None:
    weights = slow.log_file.parent / "models" / "pulled.gguf"  # where models may be
    weights.write_bytes(b"GGUF pulled")
    code, terminal, _ = in_terminal(
        env,
        *("pull", "pulled", "--checkpoint", f"file:{weights}", "--recipe", "tiny"),
        *("--server", slow.url),
    )
    assert code == 0, terminal
    assert b"pulling pulled" in terminal and b"0:00:00" in terminal, terminal


def test_the_chat_sets_shows_and_lists_its_parameters(
    echo: ServerProcess, env: dict[str, str]
) -> None:
    """``/set num_predict 3`` cuts the echo engine's answer to its first three words;
    ``/set system`` adds a message the usage counts (``--verbose``); ``/show`` lists what
    is set; a parameter it does not know, or a bad value, is said, naming the known."""
    leader, follower = pty.openpty()
    argv = ["run", echoplugin.MODEL, "--verbose", "--server", echo.url]
    chat = subprocess.Popen(
        [sys.executable, "-m", "lemoncore.cli", *argv],
        env=env,
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    seen = bytearray()

    def say(line: str, until: bytes) -> bytes:
        start = len(seen)
        os.write(leader, line.encode() + b"\n")
        read(leader, seen, until, start)
        return bytes(seen[start:])

    try:
        read(leader, seen, b">>> ")
        for line, expected in [
            ("/?", b"/set temperature 0.2"),
            ("/set num_predict 3", b"(num_predict 3)"),
            ("/set temperature 0.2", b"(temperature 0.2)"),
            ("/set parameter top_p 0.9", b"(top_p 0.9)"),
            ("/set system Be brief.", b"(system message set)"),
            ("/set warmth 3", b"unknown parameter 'warmth'; known: temperature, top_p, "),
            ("/set top_p 2", b"top_p takes a number from 0 to 1, not '2'"),
            ("/set num_predict many", b"num_predict takes a whole number of 1 or more"),
            ("/sett top_p 1", b"unknown command '/sett'; /? lists the commands"),
        ]:
            assert expected in say(line, b">>> ")
        shown = say("/show", b">>> ")
        for expected in [b"model echo-words", b"max_tokens 3", b"temperature 0.2"]:
            assert expected in shown
        assert b"top_p 0.9" in shown and b"system Be brief." in shown
        answered = say("Hi", b">>> ")
        assert b"Hello there, I\r\n" in answered  # three words
        # the prompt: "Be brief." and "Hi", one word more per message
        assert b"(5 prompt tokens, 3 generated" in answered
        say("/bye", b"")
        assert chat.wait(30) == 0
    finally:
        chat.kill()
        os.close(leader)


def test_bench_says_which_target_and_prompt_it_is_on(
    echo: ServerProcess, env: dict[str, str]
) -> None:
    argv = ["bench", echoplugin.MODEL, "--reps", "2", "--max-tokens", "4", "--json"]
    ran = subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", *argv, "--server", echo.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.splitlines() == [
        "bench: round 1/2: echo-words, prompt 'short'",
        "bench: round 1/2: echo-words, prompt 'long'",
        "bench: round 2/2: echo-words, prompt 'short'",
        "bench: round 2/2: echo-words, prompt 'long'",
        "bench: echo-words: cold start 1/2",
        "bench: echo-words: cold start 2/2",
    ]
    report = json.loads(ran.stdout)
    assert report[echoplugin.MODEL]["cold"]["ttft_ms"]["n"] == 2
