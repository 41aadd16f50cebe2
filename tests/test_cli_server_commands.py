"""``lemon`` commands against a real server process (the core test backend, with ``lemon
serve``'s logging, an API key and a different admin key), each run as a subprocess with
its ``--json`` parsed: ``logs --model`` takes an alias, ``load --unpin`` unpins without a
reload, ``show`` gives a model's card, ``list`` is ``models``, a server message's route
reads as the ``lemon`` command, and an engine flag written ``--flag=value`` is refused
saying how to write it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lemoncore.testing import ServerProcess, running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, SCRIPT

KEYS = {"LEMON_API_KEY": "user-key", "LEMON_ADMIN_API_KEY": "admin-key"}
ALIASED, ALIAS = "tiny-two", "tt"  # a user model with an alias
LOGGED = f"""\
import runpy
from lemoncore.logs import configure_logging
configure_logging()  # as lemon serve does: GET /api/v1/logs then has lines
runpy.run_path({str(SCRIPT)!r}, run_name="__main__")
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    cache = tmp_path_factory.mktemp("lemon")
    weights = cache / "models" / "two.gguf"
    weights.parent.mkdir()
    weights.write_bytes(b"GGUF two")
    (cache / "user_models.json").write_text(
        json.dumps(
            [
                {
                    "name": ALIASED,
                    "recipe": "tiny",
                    "checkpoint": f"file:{weights}",
                    "aliases": [ALIAS],
                }
            ]
        )
    )
    script = cache / "logged_tinyplugin.py"
    script.write_text(LOGGED)
    with running_server(cache, KEYS, command=(str(script),)) as s:
        yield s


@pytest.fixture
def lemon(server: ServerProcess, tmp_path: Path) -> Any:
    """``lemon ARGV… --server URL`` as a subprocess, with both keys and a cache of its own."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LEMON_")},
        **KEYS,
        "LEMON_CACHE_DIR": str(tmp_path),
        "LEMON_CONFIG_FILE": str(tmp_path / "config.toml"),
    }

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lemoncore.cli", *argv, "--server", server.url],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


def parsed(ran: subprocess.CompletedProcess[str]) -> Any:
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_logs_of_an_alias_are_its_model_s_lines_and_an_unknown_model_is_an_error(
    lemon: Any,
) -> None:
    assert parsed(lemon("load", ALIAS, "--json"))["model_name"] == ALIASED
    ran = lemon("logs", "--model", ALIAS)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines and all(f"model={ALIASED}" in line for line in lines)
    assert any("model loaded" in line for line in lines)
    missing = lemon("logs", "--model", "no-such-model")
    assert missing.returncode == 1 and missing.stdout == ""
    assert "'no-such-model' not found" in missing.stderr
    assert "'lemon models --all'" in missing.stderr and "GET /" not in missing.stderr


def test_unpin_keeps_the_model_running_and_lets_it_go(lemon: Any) -> None:
    assert parsed(lemon("load", MODEL, "--pin", "--json"))["pinned"] is True
    [before] = [m for m in parsed(lemon("ps", "--json")) if m["model_name"] == MODEL]
    assert before["pinned"] is True
    assert parsed(lemon("load", MODEL, "--unpin", "--json"))["pinned"] is False
    [after] = [m for m in parsed(lemon("ps", "--json")) if m["model_name"] == MODEL]
    assert after["pinned"] is False and after["pid"] == before["pid"]  # not reloaded
    both = lemon("load", MODEL, "--pin", "--unpin")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_show_gives_the_card_whether_it_is_loaded_and_the_options_a_load_uses(
    lemon: Any,
) -> None:
    assert lemon("unload", "--all").returncode == 0
    shown = parsed(lemon("show", ALIAS, "--json"))
    card = shown["model"]
    assert (card["id"], card["recipe"], card["aliases"]) == (ALIASED, "tiny", [ALIAS])
    assert card["downloaded"] is True and card["size_bytes"] == len(b"GGUF two")
    assert [b["name"] for b in card["backends"]] == ["cpu"]
    assert shown["loaded"] is None
    assert shown["load_options"]["ctx_size"] == 4096  # the recipe's default
    parsed(lemon("load", ALIASED, "-o", "ctx_size=2048", "--json"))
    shown = parsed(lemon("show", ALIASED, "--json"))
    assert shown["loaded"]["model_name"] == ALIASED and shown["loaded"]["backend"] == "cpu"
    text = lemon("show", ALIAS).stdout
    assert text.startswith(f"{ALIASED}\n") and "loaded      yes, on tiny:cpu (cpu)" in text
    assert "size        8 bytes" in text and "aliases     tt" in text
    missing = lemon("show", "no-such-model")
    assert missing.returncode == 1 and "'lemon models --all'" in missing.stderr


def test_list_is_models(lemon: Any) -> None:
    listed = parsed(lemon("list", "--json"))
    assert listed == parsed(lemon("models", "--json"))
    assert {(m["name"], m["type"]) for m in listed} >= {(MODEL, "llm"), (ALIASED, "llm")}


def test_a_server_s_hint_names_the_lemon_command_not_its_route(lemon: Any) -> None:
    ran = lemon("run", "no-such-model", "hi")
    assert ran.returncode == 1
    assert ran.stderr.strip() == (
        "404: model 'no-such-model' not found; list models with 'lemon models --all'"
    )


def test_an_engine_flag_written_flag_equals_value_is_refused_saying_how_to_write_it(
    lemon: Any,
) -> None:
    refused = lemon("load", MODEL, "-o", "tiny_args=--threads=2")
    assert refused.returncode == 1
    assert "write '--threads 2', not '--threads=2'" in refused.stderr
    assert "not allowed" not in refused.stderr
    loaded = parsed(lemon("load", MODEL, "-o", "tiny_args=--threads 2", "--json"))
    assert loaded["model_name"] == MODEL
