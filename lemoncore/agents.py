"""Coding-agent CLIs wired to a lemoncore server, so one agent task can be compared across
backends. Each agent gets the server through the OpenAI-compatible environment
(``OPENAI_BASE_URL``, ``OPENAI_API_KEY``) and the model through its own flag."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Agent:
    binary: str
    install: str
    model_args: tuple[str, ...]  # "{model}" is replaced


AGENTS = {
    "opencode": Agent("opencode", "npm install -g opencode-ai", ("--model", "openai/{model}")),
    "pi": Agent("pi", "npm install -g @mariozechner/pi-coding-agent",
                ("--provider", "openai", "--model", "{model}")),
}


def agent_command(agent: Agent, api_url: str, model: str, api_key: str,
                  extra: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The agent's argv and the environment variables that point it at lemoncore."""
    argv = [agent.binary, *(a.format(model=model) for a in agent.model_args), *extra]
    env = {"OPENAI_BASE_URL": api_url, "OPENAI_API_BASE": api_url, "OPENAI_API_KEY": api_key}
    return argv, env
