"""``lemon launch`` wiring coding agents to a real server (``agent_server.py``: lemoncore's
app serving the echo engine, its answers counted per endpoint in ``/metrics``).

pi runs itself: ``@mariozechner/pi-coding-agent`` at the version ``lemoncore.agents`` pins,
installed from npm with a Node.js to run it by ``scripts/agents`` (into
``$LEMON_AGENTS_DIR/pi``, by default ``~/.cache/lemoncore/agents/pi``); without that install
the pi tests are skipped, saying so, and on CI they fail. opencode, Claude Code and Codex
run as stand-ins (``tests/agents/``) that read only what the real agents read. Every run
must reach lemoncore with the agent's key (the server refuses any other) and get the
engine's words back, and leave nothing in ``HOME`` (where the agents' own config lives)
or in the temporary directory its config was written to.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lemoncore.agents import AGENTS, agent_command, agent_environment, wired
from lemoncore.testing import ServerProcess, running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from agent_server import SCRIPT
from echoplugin import MODEL, WORDS

KEYS = {"LEMON_API_KEY": "agent-key", "LEMON_ADMIN_API_KEY": "admin-key"}
STUBS = Path(__file__).with_name("agents")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
INSTALLED = Path(os.environ.get("LEMON_AGENTS_DIR") or CACHE / "lemoncore" / "agents")
PI_PACKAGE, _, PI_VERSION = AGENTS["pi"].package.rpartition("@")
PI_HOME = INSTALLED / "pi"  # scripts/agents: npm install --prefix there
CHAT = "/v1/chat/completions"  # the engine's endpoint, every API translated to it


def pi_missing() -> str | None:
    """Why the real pi cannot run here, or ``None``."""
    install = "run scripts/agents" + ("" if shutil.which("npm") else " (needs npm)")
    package = PI_HOME / "node_modules" / PI_PACKAGE / "package.json"
    if not package.exists() or not (PI_HOME / "node_modules" / ".bin" / "node").exists():
        return f"pi and its Node.js are not installed in {PI_HOME}: {install}"
    version = json.loads(package.read_text())["version"]
    if version != PI_VERSION:
        return f"pi {version} is installed in {PI_HOME}, not {PI_VERSION}: {install}"
    return None


@pytest.fixture
def pi() -> Path:
    """The directory holding the installed ``pi`` and the ``node`` it runs on (Node.js
    >= 20.6, which ``scripts/agents`` installs beside it); skip (fail on CI) without
    them."""
    if reason := pi_missing():
        if os.environ.get("CI"):
            pytest.fail(f"CI must install pi (scripts/agents): {reason}")
        pytest.skip(reason)
    return PI_HOME / "node_modules" / ".bin"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("agents"), KEYS, command=(str(SCRIPT),)) as s:
        yield s


def answers(server: ServerProcess, endpoint: str) -> int:
    """The answers the engine gave through ``endpoint`` (200s), as ``/metrics`` counts."""
    text = httpx.get(
        server.url + "/metrics", headers={"Authorization": "Bearer admin-key"}, timeout=10
    ).text
    found = re.search(
        rf'^lemon_backend_answers_total{{model="{MODEL}",endpoint="{endpoint}",'
        rf'status="200"}} (\d+)$',
        text,
        re.MULTILINE,
    )
    return int(found[1]) if found else 0


def launch(
    server: ServerProcess, tmp_path: Path, bin_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``lemon launch ARGS`` with ``bin_dir`` first on ``PATH``, both keys in its config
    file (so the agent has its key only if lemon passes it on), an empty ``HOME`` and
    temporary directory of its own (:func:`left_behind` reads them)."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    config = tmp_path / "lemon.toml"
    config.write_text(
        "".join(f'{k.removeprefix("LEMON_").lower()} = "{v}"\n' for k, v in KEYS.items())
    )
    env = {
        **os.environ,
        "LEMON_CONFIG_FILE": str(config),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PI_OFFLINE": "1",  # pi: no update check at startup (dist/main.js, --offline)
    }
    return subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", "launch", "--server", server.url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def left_behind(tmp_path: Path) -> list[str]:
    """What :func:`launch`'s run left in its ``HOME`` and temporary directory."""
    return [str(p.relative_to(tmp_path)) for d in ("home", "tmp") for p in (tmp_path / d).iterdir()]


def test_pi_reaches_lemoncore_in_print_mode(
    server: ServerProcess, tmp_path: Path, pi: Path
) -> None:
    """The real pi, ``-p`` (its print mode: ``dist/cli/args.js``), answers with the
    engine's words: its chat completion reached lemoncore, which counted it."""
    before = answers(server, CHAT)
    done = launch(server, tmp_path, pi, "pi", "-m", MODEL, "--", "-p", "Say hi")
    assert done.returncode == 0, done.stdout + done.stderr
    assert WORDS in done.stdout
    assert answers(server, CHAT) > before
    assert left_behind(tmp_path) == []


def test_pi_comparison_run_records_its_answer(
    server: ServerProcess, tmp_path: Path, pi: Path
) -> None:
    """``--out``: the real pi once per target, non-interactively, its output and the tokens
    lemoncore counted recorded."""
    out = tmp_path / "runs"
    done = launch(
        server, tmp_path, pi, "pi", "-m", MODEL, "--agent-args=-p 'Say hi'", "--out", str(out)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = json.loads((out / "results.json").read_text())
    assert row["exit_code"] == 0 and row["tokens"] > 0, row
    assert WORDS in Path(row["output"]).read_text()
    assert left_behind(tmp_path) == []


@pytest.mark.parametrize(
    ("agent", "batch"),
    [("opencode", ("run", "Say hi")), ("claude", ("-p", "Say hi")), ("codex", ("exec", "Say hi"))],
)
def test_a_stand_in_agent_reaches_lemoncore(
    server: ServerProcess, tmp_path: Path, agent: str, batch: tuple[str, ...]
) -> None:
    """Each stand-in, reading its config where the real agent does, reaches lemoncore on
    the API the agent speaks (opencode chat completions, Claude Code Messages, Codex
    Responses; the last two translated to chat for the echo engine, whose answers
    ``/metrics`` counts)."""
    before = answers(server, CHAT)
    done = launch(server, tmp_path, STUBS, agent, "-m", MODEL, "--", *batch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert WORDS in done.stdout
    assert answers(server, CHAT) > before
    assert left_behind(tmp_path) == []


def test_claude_code_reaches_lemoncore_whatever_the_user_s_settings_say(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A gateway in the user's ``~/.claude/settings.json`` (its ``env`` beats the
    process's: Claude Code 2.1.332) does not take the run: the run's ``--settings`` file
    is above it."""
    user = tmp_path / "home" / ".claude" / "settings.json"
    user.parent.mkdir(parents=True)
    user.write_text(json.dumps({"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}}))
    before = answers(server, CHAT)
    done = launch(server, tmp_path, STUBS, "claude", "-m", MODEL, "--", "-p", "Say hi")
    assert done.returncode == 0, done.stdout + done.stderr
    assert WORDS in done.stdout and answers(server, CHAT) > before
    assert left_behind(tmp_path) == ["home/.claude"]


def test_the_agent_gets_its_key_but_never_the_admin_key(tmp_path: Path) -> None:
    """The key is in the agent's environment or its config, never its command line; the
    admin key is not passed on."""
    for name, agent in AGENTS.items():
        wiring = agent_command(agent, "http://h:1/v1", "m", "agent-key", (), tmp_path)
        assert "agent-key" not in " ".join(wiring.argv), name
        env = agent_environment({**KEYS, "PATH": "/bin"}, wiring)
        assert "LEMON_ADMIN_API_KEY" not in env and env["PATH"] == "/bin", name
        assert any("agent-key" in text for text in [*env.values(), *wiring.files.values()])


def test_the_run_s_config_directory_is_removed_even_when_the_run_fails() -> None:
    with pytest.raises(RuntimeError), wired(AGENTS["codex"], "http://h:1/v1", "m", "k", ()) as w:
        home = Path(w.env["CODEX_HOME"])
        assert (home / "config.toml").read_text().startswith('model = "m"')
        raise RuntimeError
    assert not home.exists()


def test_a_missing_agent_names_the_pinned_install(server: ServerProcess, tmp_path: Path) -> None:
    if shutil.which("pi"):
        pytest.skip("a pi is installed on PATH")
    done = launch(server, tmp_path, tmp_path, "pi", "-m", MODEL)
    assert done.returncode == 127
    assert f"npm install -g {PI_PACKAGE}@{PI_VERSION}" in done.stderr
