"""Coding-agent CLIs wired to a lemoncore server, so one agent task can be compared across
backends and models (``lemon launch``). Each agent is configured the way it reads its own
configuration: a config file in a directory made for the run (and removed after it) that
the agent is pointed at by its own environment variable or flag. Nothing is written into
the user's agent configuration, and the run's takes precedence over it: pi and Codex read
only the run's directory (so what they keep of the run, its session, goes with it);
opencode and Claude Code merge the run's file over the user's configuration.
The key reaches the agent as ``LEMON_API_KEY`` where its config can name a variable.

Each wiring follows the agent's source at the pinned version (``Agent.package``):

- pi (``@mariozechner/pi-coding-agent``; ``dist/`` of the npm package): ``config.js``
  ``getAgentDir`` reads ``PI_CODING_AGENT_DIR`` (else ``~/.pi/agent``) and
  ``getModelsPath`` is ``models.json`` there; ``core/model-registry.js``
  ``loadCustomModels`` reads its ``providers`` (``baseUrl``, ``api``, ``apiKey``,
  ``compat``, ``models``); ``core/resolve-config-value.js`` ``resolveConfigValue`` takes
  ``apiKey`` as the name of an environment variable when one is set;
  ``core/model-resolver.js`` ``resolveCliModel`` finds ``--provider``/``--model`` there
  (an unknown ``--model`` under ``--provider openai`` becomes a copy of pi's default
  OpenAI model, ``api.openai.com``: ``buildFallbackModel``; pi reads no
  ``OPENAI_BASE_URL``). ``cli/args.js``: ``-p``/``--print`` is its non-interactive mode.
- opencode (``opencode-ai``; ``packages/opencode/src/config/config.ts`` of
  anomalyco/opencode, and the strings of the 1.18.33 binary): ``OPENCODE_CONFIG`` names
  a config file merged over the global one; a ``provider`` entry with ``npm``
  ``@ai-sdk/openai-compatible`` takes ``options.baseURL`` and ``options.apiKey``
  (``config/variable.ts`` ``substitute``: ``{env:NAME}`` is that variable); the model,
  ``provider/model``, is also given as ``--model``, since a project's ``opencode.json``
  is merged over that file (run here: its ``model`` took the run elsewhere).
  ``opencode run MESSAGE`` is its non-interactive mode.
- Claude Code (``@anthropic-ai/claude-code``; code.claude.com/docs/en/settings and
  /env-vars, and the strings of the 2.1.332 binary): ``--settings FILE`` loads a settings
  file above the user's and project's; its ``env`` is applied to the process
  (``ANTHROPIC_BASE_URL`` without ``/v1``, ``ANTHROPIC_AUTH_TOKEN`` sent as
  ``Authorization: Bearer``, ``ANTHROPIC_MODEL``, ``ANTHROPIC_DEFAULT_HAIKU_MODEL`` for
  its background requests). Plain environment variables would lose to an ``env`` block
  in the user's ``~/.claude/settings.json``. ``-p`` is its non-interactive mode.
- Codex (``@openai/codex``; openai/codex ``codex-rs/utils/home-dir/src/lib.rs``
  ``find_codex_home``: ``CODEX_HOME``, else ``~/.codex``, holding ``config.toml``;
  ``codex-rs/model-provider-info/src/lib.rs`` ``ModelProviderInfo``: ``base_url``,
  ``env_key``, ``wire_api``, of which only ``"responses"`` is left: ``"chat"`` is refused).
  ``codex exec PROMPT`` is its non-interactive mode.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

PROVIDER = "lemoncore"  # the provider's name in each agent's config
KEY_VARIABLE = "LEMON_API_KEY"  # the variable that carries the key to the agent


@dataclass(frozen=True)
class Values:
    """What a wiring fills in: the model, the OpenAI base URL (``…/v1``), the server
    (without ``/v1``), the agent's key and the run's config directory."""

    model: str
    url: str
    server: str
    key: str
    home: Path


@dataclass(frozen=True)
class Wiring:
    """One run's argv, the environment variables it adds, and its config files (paths
    relative to the run's directory, and their text)."""

    argv: list[str]
    env: dict[str, str]
    files: dict[str, str]


def _no_files(values: Values) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Agent:
    """How to run one agent CLI against lemoncore. ``args`` (before the user's) and
    ``env`` values may use ``{model}``, ``{url}``, ``{server}``, ``{key}`` and ``{home}``
    (the run's config directory); ``files`` writes the config there. ``package`` is the
    npm package at the version whose source the wiring follows; ``batch`` says how its
    non-interactive mode is asked for."""

    binary: str
    package: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    files: Callable[[Values], dict[str, str]] = _no_files
    batch: str = ""
    note: str = ""

    @property
    def install(self) -> str:
        """The command that installs the version the wiring follows."""
        return f"npm install -g {self.package}"


def pi_files(v: Values) -> dict[str, str]:
    """pi's ``models.json``: lemoncore as an OpenAI chat-completions provider with the one
    model. ``compat``: a system message rather than OpenAI's ``developer`` role, and no
    ``store`` or ``reasoning_effort`` (pi-ai ``dist/providers/openai-completions.js``
    ``getCompat``)."""
    provider = {
        "baseUrl": v.url,
        "api": "openai-completions",
        "apiKey": KEY_VARIABLE,
        "compat": {
            "supportsDeveloperRole": False,
            "supportsReasoningEffort": False,
            "supportsStore": False,
        },
        "models": [{"id": v.model}],
    }
    return {"models.json": json.dumps({"providers": {PROVIDER: provider}}, indent=2)}


def opencode_files(v: Values) -> dict[str, str]:
    """opencode's config file: lemoncore as an OpenAI-compatible provider, its model the
    default."""
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": PROVIDER,
        "options": {"baseURL": v.url, "apiKey": f"{{env:{KEY_VARIABLE}}}"},
        "models": {v.model: {"name": v.model}},
    }
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": f"{PROVIDER}/{v.model}",
        "provider": {PROVIDER: provider},
    }
    return {"opencode.json": json.dumps(config, indent=2)}


def claude_files(v: Values) -> dict[str, str]:
    """Claude Code's settings file: the server, key and model as its ``env``."""
    env = {
        "ANTHROPIC_BASE_URL": v.server,
        "ANTHROPIC_AUTH_TOKEN": v.key,
        "ANTHROPIC_MODEL": v.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": v.model,
    }
    return {"settings.json": json.dumps({"env": env}, indent=2)}


def codex_files(v: Values) -> dict[str, str]:
    """Codex's ``config.toml``: lemoncore as a Responses API provider, its model the
    default. (A JSON string is a TOML basic string.)"""
    q = json.dumps
    return {
        "config.toml": f"model = {q(v.model)}\nmodel_provider = {q(PROVIDER)}\n\n"
        f"[model_providers.{PROVIDER}]\nname = {q(PROVIDER)}\nbase_url = {q(v.url)}\n"
        f'env_key = {q(KEY_VARIABLE)}\nwire_api = "responses"\n'
    }


KEY_ENV = {KEY_VARIABLE: "{key}"}
AGENTS = {
    "opencode": Agent(
        "opencode",
        "opencode-ai@1.18.33",
        ("--model", f"{PROVIDER}/{{model}}"),  # a project's opencode.json beats the file's
        {"OPENCODE_CONFIG": "{home}/opencode.json", **KEY_ENV},
        files=opencode_files,
        batch="--agent-args \"run 'TASK'\"",
    ),
    "pi": Agent(
        "pi",
        "@mariozechner/pi-coding-agent@0.73.1",
        ("--provider", PROVIDER, "--model", "{model}"),
        {"PI_CODING_AGENT_DIR": "{home}", **KEY_ENV},
        pi_files,
        batch="--agent-args \"-p 'TASK'\"",
    ),
    # Claude Code speaks Anthropic's Messages API (lemoncore serves /v1/messages).
    "claude": Agent(
        "claude",
        "@anthropic-ai/claude-code@2.1.332",
        ("--settings", "{home}/settings.json"),
        files=claude_files,
        batch="--agent-args \"-p 'TASK'\"",
    ),
    # Codex speaks only OpenAI's Responses API (lemoncore serves /v1/responses).
    "codex": Agent(
        "codex",
        "@openai/codex@0.171.0",
        env={"CODEX_HOME": "{home}", **KEY_ENV},
        files=codex_files,
        batch="--agent-args \"exec 'TASK'\" (codex exec)",
    ),
}
HIDDEN = ("LEMON_ADMIN_API_KEY",)  # never in an agent's environment


def agent_command(
    agent: Agent, api_url: str, model: str, api_key: str, extra: Sequence[str], home: Path
) -> Wiring:
    """The agent's argv, environment and config files, with ``home`` its config
    directory."""
    values = Values(model, api_url, re.sub(r"/v1$", "", api_url), api_key, home)
    fill = {k: str(getattr(values, k)) for k in ("model", "url", "server", "key", "home")}
    argv = [agent.binary, *(a.format(**fill) for a in agent.args), *extra]
    env = {k: v.format(**fill) for k, v in agent.env.items()}
    return Wiring(argv, env, agent.files(values))


def agent_environment(base: Mapping[str, str], wiring: Wiring) -> dict[str, str]:
    """The agent's environment: ``base`` without the admin key, plus the wiring's."""
    return {**{k: v for k, v in base.items() if k not in HIDDEN}, **wiring.env}


@contextmanager
def wired(
    agent: Agent, api_url: str, model: str, api_key: str, extra: Sequence[str]
) -> Iterator[Wiring]:
    """:func:`agent_command` with its config files written into a new private directory,
    removed when the context exits."""
    home = Path(tempfile.mkdtemp(prefix=f"lemon-{agent.binary}-"))
    try:
        wiring = agent_command(agent, api_url, model, api_key, extra, home)
        for name, text in wiring.files.items():
            path = home / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            path.chmod(0o600)  # it may hold the key
        yield wiring
    finally:
        shutil.rmtree(home, ignore_errors=True)
