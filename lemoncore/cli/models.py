"""Commands about model weights: ``lemon models`` lists the models lemoncore knows (marking
the downloaded ones), and ``lemon pull`` downloads one, first registering it when it is
new (a name, a checkpoint and a recipe). Both go through the running server when one
answers (``--server``, else the one the settings describe), so what the server serves is
what they show and change; without one they read and write the cache directly.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from lemoncore.cli.common import add_server_arg, core_from, print_result
from lemoncore.cli.remote import Remote, RemoteError

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
    progress on stderr; a failure is a :class:`RemoteError` with the server's reason."""
    from rich.console import Console
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    from lemoncore.api import replies

    name = body["model_name"]
    with (
        Progress(
            *Progress.get_default_columns(),
            DownloadColumn(),
            TransferSpeedColumn(),
            transient=True,
            console=Console(stderr=True),
        ) as bar,
        remote.events("/api/v1/pull", {**body, "stream": True}) as events,
    ):
        task = bar.add_task(f"pulling {name}", total=None)
        for event, data in events:
            if event == "progress":
                tick = replies.Progress.model_validate(data, extra="ignore")
                bar.update(task, completed=tick.bytes_downloaded, total=tick.bytes_total)
            elif event == "error":
                failed = replies.StreamError.model_validate(data, extra="ignore").error
                raise RemoteError(f"pulling {name} failed: {failed}")


def cmd_models(args: argparse.Namespace) -> int:
    remote = _server(args)
    if remote is not None:
        cards = remote.get("/v1/models?show_all=true")["data"]
        rows = [
            {k: c[k] for k in ("recipe", "checkpoint", "downloaded")} | {"name": c["id"]}
            for c in cards
        ]
    else:
        core = core_from(args)
        rows = [
            {
                "name": m.name,
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
            print(f"{mark} {r['name']:<32} {r['recipe']:<10} {r['checkpoint']}")

    print_result(rows, args.json, table)
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
            core.models.register(
                ModelInfo(name=args.name, recipe=args.recipe, checkpoint=args.checkpoint)
            )
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
    models = sub.add_parser("models", help="list models (the running server's, if one answers)")
    models.add_argument("--all", action="store_true", help="include models not downloaded")
    add_server_arg(models)
    models.set_defaults(func=cmd_models)


def add_pull(sub: Subparsers) -> None:
    pull = sub.add_parser(
        "pull", help="download a model, registering it if new (through the running server)"
    )
    pull.add_argument("name")
    pull.add_argument("--checkpoint")
    pull.add_argument("--recipe", default="llamacpp")
    add_server_arg(pull, json_flag=False)
    pull.set_defaults(func=cmd_pull)
