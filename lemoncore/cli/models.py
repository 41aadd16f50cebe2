"""Commands about model weights: ``lemon models`` lists the models lemoncore knows (marking
the downloaded ones), and ``lemon pull`` downloads one into the cache, first registering it
when it is new (a name, a checkpoint and a recipe).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from lemoncore.cli.common import core_from, print_result

if TYPE_CHECKING:
    from lemoncore.cli.common import Subparsers


def cmd_models(args: argparse.Namespace) -> int:
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
    models = sub.add_parser("models", help="list models")
    models.add_argument("--all", action="store_true", help="include models not downloaded")
    models.add_argument("--json", action="store_true")
    models.set_defaults(func=cmd_models)


def add_pull(sub: Subparsers) -> None:
    pull = sub.add_parser("pull", help="download a model (registering it if new)")
    pull.add_argument("name")
    pull.add_argument("--checkpoint")
    pull.add_argument("--recipe", default="llamacpp")
    pull.set_defaults(func=cmd_pull)
