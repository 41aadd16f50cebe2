"""What every ``lemon`` command shares: the clock that startup time is measured from,
turning parsed flags into :class:`~lemoncore.settings.Settings` and a built core, printing
a result as JSON or as the command's own table, the ``--server`` flag of the commands
that talk to a running server (:mod:`lemoncore.cli.remote`), and what long operations
show on a terminal's stderr (rich): the download progress bar, and a spinner with the
time elapsed. Nothing here imports the settings, a plugin or a backend until a command
asks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from rich.progress import ProgressColumn, TaskID

    from lemoncore.settings import Settings

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]
    """What ``add_subparsers`` returns; each command module adds its parsers to it."""

STARTED = time.perf_counter()


SERVER_HELP = "server URL (default: http://<host>:<port> from settings)"


def add_server_arg(p: argparse.ArgumentParser, json_flag: bool = True) -> None:
    """``--server URL`` (and ``--json``) for a command that talks to a running server."""
    p.add_argument("--server", help=SERVER_HELP)
    if json_flag:
        p.add_argument("--json", action="store_true")


def settings_from(args: argparse.Namespace) -> Settings:
    from lemoncore.settings import Settings

    flags = {k: v for k, v in vars(args).items() if v is not None and k in Settings.model_fields}
    return Settings(**flags)


def core_from(args: argparse.Namespace) -> Any:
    from lemoncore.core import build_core

    return build_core(settings_from(args))


def parse_options(items: list[str]) -> dict[str, object]:
    """``-o key=value`` flags: each value as JSON when it parses (numbers, booleans),
    else as a string; the server checks them against the options it declares."""
    options: dict[str, object] = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def print_result(data: Any, as_json: bool, table: Callable[[], None]) -> None:
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        table()


def download_columns() -> tuple[ProgressColumn, ...]:
    """A download's columns: what, the bar, percent, time left, bytes, speed, time spent."""
    from rich.progress import DownloadColumn, Progress, TimeElapsedColumn, TransferSpeedColumn

    return (
        *Progress.get_default_columns(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
    )


@contextmanager
def waiting(label: str, show: bool = True) -> Iterator[Callable[[], None]]:
    """While the block runs: a spinner, ``label`` and the time elapsed, on stderr, when
    ``show`` and stderr is a terminal (a pipe, a log or ``--json`` output never gets
    one); the block gets a function that takes it away sooner."""
    if not show or not sys.stderr.isatty():
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    spinner = Progress(
        SpinnerColumn(),
        TextColumn(label, markup=False),
        TimeElapsedColumn(),
        transient=True,
        console=Console(stderr=True),
    )
    spinner.add_task(label, total=None)
    with spinner:
        yield spinner.stop


def progress_bar(label: str) -> Callable[[int, int], None]:
    """A download's progress on stderr, drawn by rich (a bar on a terminal, nothing live
    when stderr is a pipe), fed ``(bytes_done, bytes_total)``. It starts with the first
    call and ends when ``bytes_done`` reaches ``bytes_total``, or at exit."""
    import atexit

    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(*download_columns(), console=Console(stderr=True))
    task: list[TaskID] = []

    def show(done: int, total: int) -> None:
        if not task:
            bar.start()
            atexit.register(bar.stop)  # a failed download leaves no hidden cursor
            task.append(bar.add_task(label, total=total or None))
        bar.update(task[0], completed=done, total=total or None)
        if total and done >= total:
            bar.stop()

    return show
