"""The ``lemon`` command line (the console script and ``python -m lemoncore.cli``): this
module builds the argparse tree from each area's ``add_*`` functions, in the order
``lemon --help`` lists the commands, and :func:`main` dispatches to the chosen command.
The commands live by area: :mod:`~lemoncore.cli.serving` (serve, explain),
:mod:`~lemoncore.cli.daemon` (stop, status, ``serve --detach``), :mod:`~lemoncore.cli.chat`
(run; its session's commands in :mod:`~lemoncore.cli.chat_session`),
:mod:`~lemoncore.cli.control` (ps, load, unload, rm, logs),
:mod:`~lemoncore.cli.plugins` (plugins, plugins new), :mod:`~lemoncore.cli.backends`
(backends, tiers), :mod:`~lemoncore.cli.validate`, :mod:`~lemoncore.cli.worker`,
:mod:`~lemoncore.cli.lock` (lock, lock refresh), :mod:`~lemoncore.cli.models` (models or
list, show, pull), :mod:`~lemoncore.cli.measure` (bench, launch), with shared helpers in
:mod:`~lemoncore.cli.common`. Every command that talks to a running server does it
through :class:`~lemoncore.cli.remote.Remote` (its URL, and the key each route needs).
Each command imports what it needs when it runs (the settings, pydantic, httpx, anyio,
structlog, rich), so ``lemon --help`` loads none of them
(``tests/test_import_budget.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeGuard

from lemoncore.cli import (
    backends,
    chat,
    control,
    daemon,
    lock,
    measure,
    models,
    plugins,
    serving,
    validate,
    worker,
)
from lemoncore.cli.common import progress_bar
from lemoncore.cli.remote import RemoteError
from lemoncore.cli.serving import serve_app

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["main", "parser", "progress_bar", "serve_app"]

DESCRIPTION = (
    "The ``lemon`` command line: serve, run, ps, load, models, backends, plugins, validate, worker."
)


class _Version(argparse.Action):
    """``lemon --version``: the installed lemoncore's version, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print lemoncore's version and exit")

    def __call__(self, p: argparse.ArgumentParser, *_: object) -> None:
        from lemoncore import __version__

        print(f"lemon {__version__}")
        p.exit()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lemon", description=DESCRIPTION)
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True)
    for add in (
        serving.add_serve,
        daemon.add_stop,
        chat.add_run,
        control.add_control,
        plugins.add_plugins,
        backends.add_tiers,
        backends.add_backends,
        validate.add_validate,
        worker.add_worker,
        measure.add_bench,
        measure.add_launch,
        lock.add_lock,
        models.add_models,
        models.add_show,
        models.add_pull,
        serving.add_explain,
    ):
        add(sub)
    return p


def _parse(p: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace:
    """``words`` parsed; a command whose trailing words (``set_defaults(trailing=DEST)``)
    may come after its options gets them all (``lemon run MODEL --max-tokens 30 hi``:
    argparse alone ends ``nargs="*"`` at the first option)."""
    args, extra = p.parse_known_args(words)
    if not extra:
        return args
    trailing: str | None = getattr(args, "trailing", None)
    if trailing is None or any(w.startswith("-") for w in extra):
        return p.parse_args(words)  # argparse's own error, exit 2
    setattr(args, trailing, [*getattr(args, trailing), *extra])
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (default: ``sys.argv``); its exit status. Everything
    after ``--`` goes to the launched agent untouched. A reader that stops reading
    (``lemon backends | head -2``) ends the command quietly, status 1, as Python's
    documentation of SIGPIPE recommends: stdout goes to devnull, so the interpreter's own
    last flush cannot fail with a traceback."""
    try:
        try:
            status = _run(list(sys.argv[1:] if argv is None else argv))
        finally:  # --help and --version exit through here too
            sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return status


def _run(words: list[str]) -> int:
    cut = words.index("--") if "--" in words else len(words)
    args = _parse(parser(), words[:cut])
    args.passthrough = words[cut + 1 :]
    args.argv = words
    try:
        result: int = args.func(args)
    except RemoteError as exc:  # a running server's answer, or its absence
        print(exc, file=sys.stderr)
        return 1
    except Exception as exc:  # a setting (LEMON_*, the flags) that cannot be used
        if not _settings_error(exc):
            raise
        for error in exc.errors():
            name = ".".join(str(part) for part in error["loc"])
            print(
                f"lemon: setting {name} (LEMON_{name.split('.')[0].upper()}): "
                f"{error['msg'].removeprefix('Value error, ')}",
                file=sys.stderr,
            )
        return 2
    return result


def _settings_error(exc: Exception) -> TypeGuard[ValidationError]:
    """Whether ``exc`` is pydantic's refusal of the settings (pydantic is imported only
    when one could have been raised, that is when it is already loaded)."""
    if "pydantic" not in sys.modules:
        return False
    from pydantic import ValidationError

    return isinstance(exc, ValidationError) and exc.title == "Settings"
