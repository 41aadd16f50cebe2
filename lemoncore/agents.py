"""Coding-agent CLIs wired to a lemoncore server, so one agent task can be compared across
backends and models (``lemon launch``). Each agent gets the server through environment
variables and the model through its own flag; nothing is written into the user's own
agent configuration."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Agent:
    """How to run one agent CLI against lemoncore. ``model_args`` and ``env`` values may
    use ``{model}``, ``{url}`` (the OpenAI base URL, ``…/v1``), ``{server}`` (without
    ``/v1``) and ``{key}``. ``batch`` says how its non-interactive mode is asked for."""

    binary: str
    install: str
    model_args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    batch: str = ""
    note: str = ""


OPENAI_ENV = {"OPENAI_BASE_URL": "{url}", "OPENAI_API_BASE": "{url}", "OPENAI_API_KEY": "{key}"}
AGENTS = {
    "opencode": Agent(
        "opencode",
        "npm install -g opencode-ai",
        ("--model", "openai/{model}"),
        OPENAI_ENV,
        batch="--agent-args \"run 'TASK'\"",
    ),
    "pi": Agent(
        "pi",
        "npm install -g @mariozechner/pi-coding-agent",
        ("--provider", "openai", "--model", "{model}"),
        OPENAI_ENV,
        batch="--agent-args \"-p 'TASK'\"",
    ),
    # Claude Code speaks Anthropic's Messages API; lemoncore must route /v1/messages.
    "claude": Agent(
        "claude",
        "npm install -g @anthropic-ai/claude-code",
        ("--model", "{model}"),
        {
            "ANTHROPIC_BASE_URL": "{server}",
            "ANTHROPIC_AUTH_TOKEN": "{key}",
            "ANTHROPIC_MODEL": "{model}",
        },
        batch="--agent-args \"-p 'TASK'\"",
        note="needs lemoncore to serve Anthropic's /v1/messages",
    ),
    # Codex, through a provider given on its command line (no edit of ~/.codex/config.toml).
    "codex": Agent(
        "codex",
        "npm install -g @openai/codex",
        (
            "-m",
            "{model}",
            "-c",
            "model_provider=lemoncore",
            "-c",
            'model_providers.lemoncore={{name="lemoncore", base_url="{url}", '
            'env_key="OPENAI_API_KEY", wire_api="chat"}}',
        ),
        OPENAI_ENV,
        batch="--agent-args \"exec 'TASK'\" (codex exec)",
    ),
}


def agent_command(
    agent: Agent, api_url: str, model: str, api_key: str, extra: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """The agent's argv and the environment variables that point it at lemoncore."""
    values = {
        "model": model,
        "url": api_url,
        "server": re.sub(r"/v1$", "", api_url),
        "key": api_key,
    }
    argv = [agent.binary, *(a.format(**values) for a in agent.model_args), *extra]
    return argv, {k: v.format(**values) for k, v in agent.env.items()}
