"""What the stand-in agents in this directory share (they run it from here: a script's own
directory is first on ``sys.path``): one streamed request to the endpoint their config
names, its server-sent events read as the real agents read them, and the way they fail.

Each stand-in reads only what the real agent reads (its config file, flag or variable,
cited in its docstring) and sends one request where the agent would send its first: no
tool calls, one answer printed. Its ``max_tokens`` is small, unlike the agents' own."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

MAX_TOKENS = 64


def fail(agent: str, message: str) -> NoReturn:
    """Exit 1 with ``agent: message`` on stderr."""
    sys.exit(f"{agent}: {message}")


def events(
    agent: str, url: str, headers: Mapping[str, str], body: Mapping[str, Any]
) -> Iterator[dict[str, Any]]:
    """POST ``body`` as JSON to ``url``; each ``data:`` event of the stream, parsed, up to
    ``[DONE]`` or the end. A refused request fails with the server's answer."""
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            for raw in response:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                yield json.loads(data)
    except urllib.error.HTTPError as exc:
        fail(agent, f"{url}: {exc.code} {exc.read().decode('utf-8', 'replace')}")
    except urllib.error.URLError as exc:
        fail(agent, f"{url}: {exc.reason}")


def chat_text(agent: str, url: str, key: str, model: str, prompt: str) -> str:
    """The text of one streamed OpenAI chat completion (usage asked for, as the agents'
    OpenAI clients ask for it)."""
    body = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": prompt}],
    }
    pieces = [
        choice.get("delta", {}).get("content") or ""
        for event in events(
            agent, url + "/chat/completions", {"Authorization": f"Bearer {key}"}, body
        )
        for choice in event.get("choices", [])
    ]
    return "".join(pieces)
