"""Commands that manage a running server's models: ``lemon ps``, ``load`` (``--pin``,
``--unpin``), ``unload``, ``rm`` and ``logs``. Each talks to the server over HTTP
(:mod:`lemoncore.cli.remote`), and prints JSON with ``--json``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from lemoncore.cli.common import add_server_arg, parse_options, print_result, waiting
from lemoncore.cli.remote import Remote, RemoteError

if TYPE_CHECKING:
    from lemoncore.api.replies import HeldOff, LoadedModel
    from lemoncore.cli.common import Subparsers


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f} MiB"


def _idle(seconds: float) -> str:
    return (
        "-" if not seconds else f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
    )


def _unloads(m: LoadedModel) -> str:
    """When idleness unloads it: ``in 4 min``, ``5 min after use`` while busy, ``-`` when
    it is kept (pinned, or keep_alive forever)."""
    if m.unload_in_seconds is not None:
        return "now" if m.unload_in_seconds < 1 else f"in {_idle(m.unload_in_seconds)}"
    if m.keep_alive is None or m.pinned:
        return "-"
    return f"{_idle(m.keep_alive) if m.keep_alive else '0 s'} after use"


def held_off_line(held: HeldOff) -> str:
    """One held-off model (``/api/v1/health``'s ``held_off``) for ``lemon ps``: which,
    for how long, and why."""
    starts = "1 failed start" if held.failures == 1 else f"{held.failures} failed starts"
    return (
        f"held off: {held.model} ({starts}; requests may start it again in "
        f"{_idle(held.retry_in_s) if held.retry_in_s >= 1 else '1 s'}, "
        f"'lemon load {held.model}' retries now): {held.reason}"
    )


def cmd_ps(args: argparse.Namespace) -> int:
    """The server's loaded models, the models it holds off after failed starts (and why),
    then this machine's RPC workers (``lemon worker``). ``--json``: the loaded models, as
    the server gave them."""
    from lemoncore.api.replies import HeldOff, LoadedModel
    from lemoncore.rpc.records import describe, read_worker_states
    from lemoncore.settings import Settings

    health = Remote.from_args(args).get("/api/v1/health")
    loaded = health["all_models_loaded"]

    def table() -> None:
        if loaded:  # what a newer server adds is not shown
            _models_table([LoadedModel.model_validate(m, extra="ignore") for m in loaded])
        else:
            print("no model is loaded")
        for held in health.get("held_off", []):  # an older server has none
            print(held_off_line(HeldOff.model_validate(held, extra="ignore")))
        for worker in read_worker_states(Settings().cache_dir):  # lemon worker, here
            print(describe(worker))

    print_result(loaded, args.json, table)
    return 0


def _models_table(loaded: list[LoadedModel]) -> None:
    from rich.console import Console
    from rich.table import Table

    grid = Table(
        "MODEL",
        "BACKEND",
        "DEVICE",
        "STATUS",
        "IDLE",
        "UNLOADS",
        "PINNED",
        "PEAK MEMORY",
        "PID",
        box=None,
        pad_edge=False,
    )
    for m in loaded:
        busy = f" ({m.in_flight} running, {m.queued} queued)" if m.in_flight or m.queued else ""
        device = m.device.value + (f" + RPC {', '.join(m.rpc_workers)}" if m.rpc_workers else "")
        grid.add_row(
            m.model_name,
            f"{m.recipe}:{m.backend}",
            device,
            m.status + busy,
            _idle(m.idle_seconds),
            _unloads(m),
            "yes" if m.pinned else "",
            _mib(m.peak_memory_bytes),
            str(m.pid or "-"),
        )
    console = Console()
    if not console.is_terminal:  # a pipe gets whole names, not a terminal's width
        console = Console(width=500)
    console.print(grid)


def cmd_load(args: argparse.Namespace) -> int:
    """Load a model (a spinner with the time elapsed while it loads, or downloads, on a
    terminal); ``--pin`` pins it, ``--unpin`` unpins it (a loaded model keeps running)."""
    from lemoncore.api.replies import Loaded

    body = {"model_name": args.model, **parse_options(args.option)}
    if args.pinned is not None:
        body["pinned"] = args.pinned
    if args.keep_alive is not None:
        body["keep_alive"] = args.keep_alive
    with waiting(f"loading {args.model}", show=not args.json):
        answer = Remote.from_args(args).post("/api/v1/load", body)

    def text() -> None:
        loaded = Loaded.model_validate(answer, extra="ignore")
        print(
            f"loaded {loaded.model_name} on {loaded.recipe}:{loaded.backend} "
            f"({loaded.device.value}){', pinned' if loaded.pinned else ''}"
        )

    print_result(answer, args.json, text)
    return 0


def _done(args: argparse.Namespace, path: str, body: dict[str, str]) -> int:
    """POST ``body`` to a route that answers ``Done``; print its message (or JSON)."""
    from lemoncore.api.replies import Done

    answer = Remote.from_args(args).post(path, body)
    print_result(
        answer, args.json, lambda: print(Done.model_validate(answer, extra="ignore").message)
    )
    return 0


def cmd_unload(args: argparse.Namespace) -> int:
    if bool(args.model) == args.all:
        raise RemoteError("name a model, or give --all")
    return _done(args, "/api/v1/unload", {"model_name": args.model} if args.model else {})


def cmd_rm(args: argparse.Namespace) -> int:
    return _done(args, "/api/v1/delete", {"model_name": args.model})


def cmd_logs(args: argparse.Namespace) -> int:
    """The running server's recent log lines (``GET /api/v1/logs``, admin), and with
    ``--follow`` each new one until Ctrl-C; ``--model`` (a name or an alias) only that
    model's, a model the server does not know a :class:`RemoteError`."""
    from lemoncore.api.replies import LogEntries, LogEntry

    remote = Remote.from_args(args)
    model = args.model and remote.get(f"/v1/models/{args.model}")["id"]  # its log name
    query = urlencode({k: v for k, v in (("model", model), ("limit", args.lines)) if v is not None})
    try:
        if not args.follow:
            logs = LogEntries.model_validate(remote.get(f"/api/v1/logs?{query}"), extra="ignore")
            for entry in logs.data:
                print(entry.line)
            return 0
        with remote.stream_get(f"/api/v1/logs?{query}&follow=true") as events:
            for event, data in events:
                if event == "line":
                    print(LogEntry.model_validate(data, extra="ignore").line, flush=True)
    except KeyboardInterrupt:
        pass
    return 0


def add_control(sub: Subparsers) -> None:
    ps = sub.add_parser(
        "ps",
        help="loaded models: backend, device, status, idle time, "
        "when idleness unloads them, memory; models held off, and why",
    )
    add_server_arg(ps)
    ps.set_defaults(func=cmd_ps)
    load = sub.add_parser("load", help="load a model (or reload it with new options)")
    load.add_argument("model")
    load.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        help="a load option, e.g. -o backend=cpu -o ctx_size=8192",
    )
    pin = load.add_mutually_exclusive_group()
    pin.add_argument(
        "--pin", dest="pinned", action="store_const", const=True, help="never evict it"
    )
    pin.add_argument(
        "--unpin",
        dest="pinned",
        action="store_const",
        const=False,
        help="let eviction and idleness unload it again (a loaded model is not reloaded)",
    )
    load.add_argument(
        "--keep-alive",
        metavar="DURATION",
        help="unload it after this long with no request: seconds or '10m'; "
        "0: after its next answer; -1: never (default: the server's setting)",
    )
    add_server_arg(load)
    load.set_defaults(func=cmd_load)
    unload = sub.add_parser("unload", help="unload a model, or --all")
    unload.add_argument("model", nargs="?")
    unload.add_argument("--all", action="store_true")
    add_server_arg(unload)
    unload.set_defaults(func=cmd_unload)
    rm = sub.add_parser("rm", help="delete a downloaded model")
    rm.add_argument("model")
    add_server_arg(rm)
    rm.set_defaults(func=cmd_rm)
    logs = sub.add_parser("logs", help="the server's recent log lines (-f: and new ones)")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("--model", help="only lines about this model (its backend's output)")
    logs.add_argument("-n", "--lines", type=int, help="at most this many recent lines")
    add_server_arg(logs, json_flag=False)
    logs.set_defaults(func=cmd_logs)
