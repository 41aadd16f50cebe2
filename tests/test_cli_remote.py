"""The one client every ``lemon`` command that talks to a running server goes through
(:class:`lemoncore.cli.remote.Remote`): each request carries the key its route needs by
the server's own rule (:func:`lemoncore.api.guard.required_key`), so with an API key and
a different admin key set, ``lemon explain`` (a dry-run load: a management route) works
as ``lemon load`` does. Against a real server process serving the core test backend."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lemoncore.api.guard import required_key
from lemoncore.cli import main
from lemoncore.cli.remote import Remote
from lemoncore.testing import ServerProcess, running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from tinyplugin import MODEL, SCRIPT

KEYS = {"LEMON_API_KEY": "user-key", "LEMON_ADMIN_API_KEY": "admin-key"}


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/live", None),
        ("/", None),
        ("/v1/models/tiny-chat", "user-key"),
        ("/v1/chat/completions", "user-key"),
        ("/api/v1/health", "user-key"),
        ("/api/v1/load", "admin-key"),
        ("/api/v1/unload", "admin-key"),
        ("/api/v1/pull", "admin-key"),
        ("/api/v1/delete", "admin-key"),
        ("/api/v1/logs?model=x&limit=5", "admin-key"),  # the query is not the route
        ("/api/v1/logs?follow=true", "admin-key"),
    ],
)
def test_each_route_gets_the_key_the_server_asks_for(path: str, key: str | None) -> None:
    remote = Remote("http://127.0.0.1:1", "user-key", "admin-key")
    assert remote.key(path) == key
    assert {None: None, "api": "user-key", "admin": "admin-key"}[
        required_key(path.partition("?")[0])
    ] == key


def test_the_admin_key_defaults_to_the_api_key_as_the_server_s_does() -> None:
    remote = Remote("http://127.0.0.1:1", "user-key")
    assert remote.key("/api/v1/load") == remote.key("/v1/models") == "user-key"
    assert Remote("http://127.0.0.1:1").key("/api/v1/load") is None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    cache = tmp_path_factory.mktemp("lemon")
    with running_server(cache, KEYS, command=(str(SCRIPT),)) as s:
        yield s


@pytest.fixture
def keyed(server: ServerProcess, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The client's environment: both keys, a cache of its own (``lemon ps`` lists this
    machine's RPC workers from it); the server's URL."""
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LEMON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LEMON_CONFIG_FILE", str(tmp_path / "config.toml"))
    return server.url


def lemon(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_load_ps_logs_and_unload_work_with_an_admin_key(
    keyed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = lemon(capsys, "explain", MODEL, "--server", keyed, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["model_name"] == MODEL and not plan["already_loaded"]
    code, out, err = lemon(capsys, "load", MODEL, "--server", keyed, "--json")
    assert code == 0, err
    assert json.loads(out)["model_name"] == MODEL
    code, out, err = lemon(capsys, "ps", "--server", keyed, "--json")
    assert code == 0, err
    assert [m["model_name"] for m in json.loads(out)] == [MODEL]
    code, out, err = lemon(capsys, "explain", MODEL, "--server", keyed)
    assert code == 0, err
    assert "already loaded" in out
    code, _, err = lemon(capsys, "logs", "-n", "5", "--server", keyed)
    assert code == 0, err
    code, _, err = lemon(capsys, "unload", "--all", "--server", keyed)
    assert code == 0, err


def test_without_the_admin_key_management_fails_saying_which_key_and_the_rest_works(
    keyed: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LEMON_ADMIN_API_KEY")  # the client now sends the API key to all
    code, _, err = lemon(capsys, "explain", MODEL, "--server", keyed)
    assert code == 1 and err.startswith("401: ") and "LEMON_ADMIN_API_KEY" in err
    code, out, err = lemon(capsys, "ps", "--server", keyed, "--json")
    assert code == 0, err
    assert json.loads(out) == []  # an API-key route: the API key opens it
    monkeypatch.delenv("LEMON_API_KEY")
    code, _, err = lemon(capsys, "ps", "--server", keyed)
    assert code == 1 and err.startswith("401: ") and "LEMON_API_KEY" in err


def test_the_url_comes_from_the_settings_without_server(
    keyed: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = keyed.rsplit(":", 1)[1]
    monkeypatch.setenv("LEMON_HOST", "0.0.0.0")  # a wildcard bind is reached on loopback
    monkeypatch.setenv("LEMON_PORT", port)
    code, out, err = lemon(capsys, "explain", MODEL, "--json")
    assert code == 0, err
    assert json.loads(out)["model_name"] == MODEL


def test_pull_and_models_go_through_the_running_server(
    server: ServerProcess, keyed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model ``lemon pull`` registers is one the running server serves at once (it
    registers it, not the client's cache), and ``lemon models`` lists the server's."""
    weights = server.log_file.parent / "models" / "extra.gguf"  # where models may be
    weights.write_bytes(b"GGUF extra")
    code, out, err = lemon(
        capsys,
        "pull",
        "cli-extra",
        "--checkpoint",
        f"file:{weights}",
        "--recipe",
        "tiny",
        "--server",
        keyed,
    )
    assert code == 0, err
    assert out.strip() == f"cli-extra: downloaded by the server at {keyed}"
    code, out, err = lemon(capsys, "models", "--server", keyed, "--json")
    assert code == 0, err
    assert "cli-extra" in {m["name"] for m in json.loads(out)}
    code, out, err = lemon(capsys, "load", "cli-extra", "--server", keyed, "--json")
    assert code == 0, err  # served without a restart
    code, _, err = lemon(capsys, "rm", "cli-extra", "--server", keyed)
    assert code == 0, err
    code, out, err = lemon(capsys, "models", "--all", "--server", keyed, "--json")
    assert "cli-extra" not in {m["name"] for m in json.loads(out)}
    code, _, err = lemon(capsys, "pull", "no-such-model", "--server", keyed)
    assert code == 1 and "no-such-model" in err
