"""Commands about models: ``lemon models`` (or ``lemon list``) lists the models lemoncore
knows (marking the downloaded ones), ``lemon show`` gives one model's card, and ``lemon
pull`` downloads one, first registering it when it is new (a name, a checkpoint and a
recipe). ``models`` and ``pull`` go through the running server when one answers
(``--server``, else the one the settings describe), so what the server serves is what
they show and change; without one they read and write the cache directly. ``show`` asks
the running server, which knows what is loaded and which options a load would use.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from lemoncore.cli.common import add_server_arg, core_from, download_columns, print_result
from lemoncore.cli.remote import Remote, RemoteError, in_commands

if TYPE_CHECKING:
    from lemoncore.cli.common import Subparsers


def _server(args: argparse.Namespace) -> Remote | None:
    """The running server to go through: the one ``--server`` names (which must answer),
    else the one the settings describe if it answers, else ``None``."""
    remote = Remote.from_args(args)
    if args.server is None and not remote.live(timeout=1):
        return None
    return remote


def pull_through(remote: Remote, body: dict[str, Any]) -> None:
    """Have the server pull (and, with a checkpoint, register) a model, showing its
    progress and the time elapsed on stderr when it is a terminal; a failure is a
    :class:`RemoteError` with the server's reason."""
    from rich.console import Console
    from rich.progress import Progress

    from lemoncore.api import replies

    name = body["model_name"]
    bar = Progress(
        *download_columns(),
        transient=True,
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
    )
    task = bar.add_task(f"pulling {name}", total=None)  # drawn at once, time elapsed too
    with bar, remote.events("/api/v1/pull", {**body, "stream": True}) as events:
        for event, data in events:
            if event == "progress":
                tick = replies.Progress.model_validate(data, extra="ignore")
                bar.update(task, completed=tick.bytes_downloaded, total=tick.bytes_total)
            elif event == "error":
                failed = replies.StreamError.model_validate(data, extra="ignore").error
                raise RemoteError(f"pulling {name} failed: {in_commands(failed)}")


def cmd_models(args: argparse.Namespace) -> int:
    remote = _server(args)
    if remote is not None:
        cards = remote.get("/v1/models?show_all=true")["data"]
        rows = [
            {k: c[k] for k in ("recipe", "checkpoint", "downloaded")}
            | {"name": c["id"], "type": c["model_type"]}
            for c in cards
        ]
    else:
        core = core_from(args)
        rows = [
            {
                "name": m.name,
                "type": m.model_type.value,
                "recipe": m.recipe,
                "checkpoint": m.checkpoint,
                "downloaded": core.models.local_path(m) is not None,
            }
            for m in core.models.all().values()
        ]
    rows = [r for r in rows if args.all or r["downloaded"]]

    def table() -> None:
        for r in rows:
            mark = "*" if r["downloaded"] else " "
            print(f"{mark} {r['name']:<32} {r['recipe']:<10} {r['type']:<10} {r['checkpoint']}")

    print_result(rows, args.json, table)
    return 0


def _size(size: int | None) -> str:
    if size is None:
        return "unknown"
    unit, scale = next((u for u in (("GiB", 2**30), ("MiB", 2**20)) if size >= u[1]), ("", 1))
    return f"{size / scale:.1f} {unit}" if unit else f"{size} bytes"


def cmd_show(args: argparse.Namespace) -> int:
    """One model's card (``MODEL`` may be an alias), whether it is loaded (and how), and
    the options a load of it would use; ``--json``: ``{"model": card, "loaded": the
    loaded model or null, "load_options": ...}``."""
    remote = Remote.from_args(args)
    card = remote.get(f"/v1/models/{args.model}")
    health = remote.get("/api/v1/health")
    loaded = next((m for m in health["all_models_loaded"] if m["model_name"] == card["id"]), None)
    shown: dict[str, Any] = {"model": card, "loaded": loaded}
    try:  # the plan resolves the saved options with the rest; it needs the admin key
        plan = remote.post("/api/v1/load", {"model_name": card["id"], "dry_run": True}, 30)
        shown["load_options"] = plan["options"]
    except RemoteError as exc:
        shown |= {"load_options": None, "load_options_error": str(exc)}

    def table() -> None:
        backends = ", ".join(f"{b['name']} ({b['tier']}, {b['format']})" for b in card["backends"])
        how = loaded and (
            f"yes, on {loaded['recipe']}:{loaded['backend']} ({loaded['device']})"
            + (", pinned" if loaded["pinned"] else "")
        )
        options = shown["load_options"]
        rows = {
            "recipe": card["recipe"],
            "checkpoint": card["checkpoint"],
            "type": card["model_type"],
            "backends": backends or "-",
            "size": _size(card.get("size_bytes")),
            "labels": ", ".join(card["labels"]) or "-",
            "aliases": ", ".join(card["aliases"]) or "-",
            "downloaded": "yes" if card["downloaded"] else f"no (lemon pull {card['id']})",
            "loaded": how or f"no (lemon load {card['id']})",
            "options": shown.get("load_options_error")
            if options is None
            else json.dumps(options) + " (what a load uses, saved options included)",
        }
        print(card["id"])
        for key, value in rows.items():
            print(f"  {key:<11} {value}")

    print_result(shown, args.json, table)
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    remote = _server(args)
    if remote is not None:
        body: dict[str, Any] = {"model_name": args.name}
        if args.checkpoint:
            body |= {"checkpoint": args.checkpoint, "recipe": args.recipe}
        pull_through(remote, body)
        print(f"{args.name}: downloaded by the server at {remote.url}")
        return 0
    import anyio

    from lemoncore.models import ModelError
    from lemoncore.recipes import ModelInfo

    core = core_from(args)
    try:
        if args.checkpoint:
            given = ModelInfo(name=args.name, recipe=args.recipe, checkpoint=args.checkpoint)
            core.models.register(anyio.run(core.models.resolve, given))
        model = core.models.get(args.name)
        if model is None:
            raise ModelError(f"unknown model {args.name!r}; give --checkpoint and --recipe")
        path = anyio.run(core.models.pull, model)
    except ModelError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(path)
    return 0


def add_models(sub: Subparsers) -> None:
    models = sub.add_parser(
        "models", aliases=["list"], help="list models (the running server's, if one answers)"
    )
    models.add_argument("--all", action="store_true", help="include models not downloaded")
    add_server_arg(models)
    models.set_defaults(func=cmd_models)


def add_show(sub: Subparsers) -> None:
    show = sub.add_parser(
        "show",
        help="a model's card: recipe, checkpoint, backends, size, labels, "
        "whether downloaded and loaded, the options a load uses",
    )
    show.add_argument("model")
    add_server_arg(show)
    show.set_defaults(func=cmd_show)


def add_pull(sub: Subparsers) -> None:
    pull = sub.add_parser(
        "pull", help="download a model, registering it if new (through the running server)"
    )
    pull.add_argument("name")
    pull.add_argument("--checkpoint")
    pull.add_argument("--recipe", default="llamacpp")
    add_server_arg(pull, json_flag=False)
    pull.set_defaults(func=cmd_pull)
