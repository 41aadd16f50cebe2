"""``lemon run MODEL [PROMPT]``: chat with a model of the running server.

With a prompt it streams one answer and exits; without, it is an interactive chat:
streamed answers, the conversation kept for the session, line editing and history
(readline), ``\"\"\"`` to start and end a multi-line message, the slash commands of
:mod:`~lemoncore.cli.chat_session` (``/set temperature 0.2``, ``/show``, ``/clear``,
``/?``), ``/bye`` (or Ctrl-D) to leave. Ctrl-C stops the answer being written, not the
session. A model that is not downloaded is pulled first, with a progress bar; one that
is not loaded shows a spinner with the time elapsed (on a terminal) until the engine
answers.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from lemoncore.cli.chat_session import HELP, Message, Session
from lemoncore.cli.common import add_server_arg, waiting
from lemoncore.cli.remote import Remote, RemoteError

if TYPE_CHECKING:
    from lemoncore.cli.common import Subparsers


def _pull_if_needed(remote: Remote, model: str) -> str:
    """The model's name (``model`` may be an alias), pulled first if not downloaded."""
    from lemoncore.api import replies
    from lemoncore.cli.models import pull_through

    card = replies.ModelCard.model_validate(remote.get(f"/v1/models/{model}"), extra="ignore")
    if not card.downloaded:
        pull_through(remote, {"model_name": model})
    return card.id


def _loaded(remote: Remote, name: str) -> bool:
    """Whether the server has model ``name`` loaded."""
    return any(m["model_name"] == name for m in remote.get("/api/v1/health")["all_models_loaded"])


def _answer(
    remote: Remote, session: Session, messages: list[Message], args: argparse.Namespace
) -> str:
    """Stream one answer to stdout; return its text (what was written of it when Ctrl-C
    stopped it: leaving the stream closes the connection, which stops the engine)."""
    text, usage, started, first = "", None, time.monotonic(), None
    cold = not _loaded(remote, session.model)
    try:
        with (
            waiting(f"loading {session.model}", show=cold) as loaded,
            remote.events("/v1/chat/completions", session.body(messages)) as events,
        ):
            for _, chunk in events:
                if chunk is None:
                    break
                if "error" in chunk:
                    raise RemoteError(f"the answer failed: {chunk['error'].get('message')}")
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    loaded()  # the engine answers
                    delta = choice.get("delta", {}).get("content") or ""
                    first = first or (time.monotonic() if delta else None)
                    text += delta
                    print(delta, end="", flush=True)
    except KeyboardInterrupt:
        print(" [stopped]", end="")
    print()
    if args.verbose and usage and first:
        seconds = max(time.monotonic() - first, 1e-6)
        print(
            f"({usage['prompt_tokens']} prompt tokens, {usage['completion_tokens']} "
            f"generated, {usage['completion_tokens'] / seconds:.1f} tokens/s, first "
            f"token after {first - started:.2f} s)",
            file=sys.stderr,
        )
    return text


def _messages() -> Iterator[str]:
    """What the user types: one line, or a \"\"\"-delimited block; ends at /bye or EOF."""
    try:
        import readline  # noqa: F401 - line editing and history for input()
    except ImportError:  # Windows
        pass
    while True:
        try:
            line = input(">>> ")
        except EOFError:
            print()
            return
        except KeyboardInterrupt:
            print("\n(/bye or Ctrl-D to leave)")
            continue
        if line.strip().startswith('"""'):
            lines, rest = [], line.strip()[3:]
            while not rest.endswith('"""'):
                lines.append(rest)
                try:
                    rest = input("... ")
                except (EOFError, KeyboardInterrupt):
                    print()
                    rest = '"""'
            lines.append(rest[:-3])
            line = "\n".join(lines).strip()
        if line.strip() == "/bye":
            return
        if line.strip():
            yield line


def cmd_run(args: argparse.Namespace) -> int:
    remote = Remote.from_args(args)
    session = Session(_pull_if_needed(remote, args.model))
    if args.max_tokens is not None:
        session.fields["max_tokens"] = args.max_tokens
    if args.prompt:
        _answer(remote, session, [{"role": "user", "content": " ".join(args.prompt)}], args)
        return 0
    print(HELP, file=sys.stderr)
    history = session.history
    for message in _messages():
        if session.command(message):
            continue
        history.append({"role": "user", "content": message})
        history.append({"role": "assistant", "content": _answer(remote, session, history, args)})
    return 0


def add_run(sub: Subparsers) -> None:
    run = sub.add_parser("run", help="chat with a model (one answer with PROMPT)")
    run.add_argument("model")
    run.add_argument("prompt", nargs="*", help="answer this and exit")
    run.add_argument("--verbose", action="store_true", help="tokens and speed per answer")
    run.add_argument(
        "--max-tokens",
        dest="max_tokens",
        type=int,
        help="at most this many tokens per answer (default: the engine's)",
    )
    add_server_arg(run, json_flag=False)
    run.set_defaults(func=cmd_run, trailing="prompt")  # options anywhere, as Ollama's
