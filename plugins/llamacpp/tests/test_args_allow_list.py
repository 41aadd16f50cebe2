"""``llamacpp_args`` by allow-list, checked against the real ``llama-server``: every allowed
flag exists in its ``--help``, every flag there that takes a path or URL is refused, and a
refused load changes nothing on a running server."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx
import pytest

from lemoncore.options import OptionError, check_args
from lemoncore.plugin import ServerProcess

from lemon_plugin_llamacpp.flags import TUNING_FLAGS
from lemon_plugin_llamacpp.install import pypi_plan

DEFAULT = "SmolLM2-135M-Instruct-GGUF"
# llama-server's help names a flag's argument; these metavariables mean a path or URL.
PATH_LIKE = re.compile(r"FNAME|FILE|PATH|DIR|URL|\bFN\b|TEMPLATE|SCHEMA|GRAMMAR")
LISTED_PATH_FLAGS = (
    "--log-file",
    "--lora",
    "--chat-template-file",
    "--grammar-file",
    "--slot-save-path",
    "--mmproj",
    "--model-draft",
    "--control-vector",
)


def llama_server_help() -> str:
    plan = pypi_plan()
    assert plan.location is not None, plan.message
    done = subprocess.run(
        [str(plan.location / "llama-server"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def help_lines() -> list[tuple[list[str], str]]:
    """(flag names, the flags column) for each option line of ``llama-server --help``:
    ``-t,    --threads N      description`` gives (["-t", "--threads"], "-t, --threads N")."""
    lines = []
    for line in llama_server_help().splitlines():
        if line.startswith("-"):
            column = re.split(r"\s{2,}", re.sub(r",\s+", ", ", line))[0]
            lines.append((re.findall(r"(?:^|[\s,])(--?[a-zA-Z][\w-]*)", column), column))
    assert len(lines) > 100, "llama-server --help changed its layout"
    return lines


def refused(args: str) -> bool:
    try:
        check_args(args, TUNING_FLAGS, (), "llamacpp_args", "in the request", "recipes.llamacpp")
    except OptionError:
        return True
    return False


def test_every_allowed_flag_is_a_real_llama_server_flag(
    help_lines: list[tuple[list[str], str]],
) -> None:
    real = {name for names, _ in help_lines for name in names}
    allowed = {name for flag in TUNING_FLAGS for name in flag.names}
    assert allowed - real == set()


def test_every_flag_that_takes_a_path_or_url_is_refused(
    help_lines: list[tuple[list[str], str]],
) -> None:
    path_flags = {
        name for names, column in help_lines if PATH_LIKE.search(column) for name in names
    }
    assert set(LISTED_PATH_FLAGS) <= path_flags  # the help still says what takes a path
    assert [f for f in sorted(path_flags) if not refused(f"{f} /tmp/x")] == []


def test_a_refused_load_writes_nothing_and_evicts_nothing(
    server: ServerProcess, tmp_path: Path
) -> None:
    httpx.post(
        server.url + "/api/v1/load", json={"model_name": DEFAULT}, timeout=120
    ).raise_for_status()
    before = httpx.get(server.url + "/api/v1/health").json()["all_models_loaded"]
    log = tmp_path / "x.log"
    for body in (
        {"llamacpp_args": f"--log-file {log}"},
        {"llamacpp_args": f"--threads 2 --slot-save-path {tmp_path}"},
        {"llamacpp_args": "--threads=2"},
        {"ctx_sise": 2048},
        {"ctx_size": "2k"},
        {"ctx_size": -5},
        {"system_bin": "/bin/sh"},
        {"llamacpp_args_allow": ["--log-file"]},
    ):
        response = httpx.post(
            server.url + "/api/v1/load", timeout=60, json={"model_name": DEFAULT, **body}
        )
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["code"] == "invalid_option"
    after = httpx.get(server.url + "/api/v1/health").json()["all_models_loaded"]
    assert [m["pid"] for m in after] == [m["pid"] for m in before]
    assert not log.exists() and list(tmp_path.iterdir()) == []
    reload = httpx.post(
        server.url + "/api/v1/load",
        timeout=120,
        json={"model_name": DEFAULT, "llamacpp_args": "--threads 2 -ngl 0 --temp 0.5"},
    )
    assert reload.status_code == 200, reload.text
    command = httpx.get(server.url + "/api/v1/health").json()["all_models_loaded"][0][
        "launch_command"
    ]
    assert command[-6:] == ["--threads", "2", "-ngl", "0", "--temp", "0.5"]


def test_the_engine_port_answers_only_lemoncore(server: ServerProcess) -> None:
    """Every local program and web page can reach the engine's loopback port (or, same
    user, its unix socket); without the launch's key (sent only by lemoncore, never shown)
    it gets nothing but /health."""
    httpx.post(
        server.url + "/api/v1/load", json={"model_name": DEFAULT}, timeout=120
    ).raise_for_status()
    [engine] = httpx.get(server.url + "/api/v1/health").json()["all_models_loaded"]
    url = str(engine["backend_url"])
    uds = url.removeprefix("unix:") if url.startswith("unix:") else None
    chat = {"model": DEFAULT, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
    with httpx.Client(
        base_url="http://localhost" if uds else url,
        timeout=30,
        transport=httpx.HTTPTransport(uds=uds) if uds else None,
    ) as direct:
        for method, path, body in (
            ("POST", "/v1/chat/completions", chat),
            ("GET", "/slots", None),
            ("GET", "/props", None),
            ("GET", "/metrics", None),
        ):
            answer = direct.request(
                method, path, json=body, headers={"Origin": "http://evil.example"}
            )
            assert answer.status_code == 401, (path, answer.status_code)
        assert direct.get("/health").status_code == 200
    assert not any("key" in arg.lower() for arg in engine["launch_command"])
    assert httpx.post(server.api + "/chat/completions", json=chat, timeout=60).status_code == 200
