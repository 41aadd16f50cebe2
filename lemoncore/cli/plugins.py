"""``lemon plugins``: list the plugins lemoncore found (status, version, recipes, hooks,
tiers, errors and warnings), or pip-install / uninstall one into lemoncore's own
environment. Uninstalling imports no plugin, so a broken plugin cannot stop its own removal.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from lemoncore.cli.common import core_from, print_result

if TYPE_CHECKING:
    from lemoncore.cli.common import Subparsers


def cmd_plugins(args: argparse.Namespace) -> int:
    if args.action in {"install", "uninstall"}:
        return _pip(args.action, args.name)
    records = [r.as_dict() for r in core_from(args).plugins.records]

    def table() -> None:
        for r in records:
            print(f"{r['name']:<16} {r['status']:<9} {r['version']:<10} "
                  f"{','.join(r['recipes']) or '-'}")
            if r["hooks"]:
                print(f"    hooks: {', '.join(r['hooks'])}")
            if r["tiers"]:
                print("    tiers: " + ", ".join(f"{b}={t}" for b, t in r["tiers"].items()))
            for problem in filter(None, [r["error"], *r["warnings"]]):
                print(f"    {problem}")

    print_result(records, args.json, table)
    return 0


def _pip(action: str, name: str | None) -> int:
    """pip into lemoncore's own environment; imports no plugin, so a broken one cannot
    stop its own removal."""
    import subprocess

    if not name:
        print(f"usage: lemon plugins {action} NAME", file=sys.stderr)
        return 2
    argv = [sys.executable, "-m", "pip", action, *(["-y"] if action == "uninstall" else []),
            name]
    return subprocess.run(argv, check=False).returncode


def add_plugins(sub: Subparsers) -> None:
    plugins = sub.add_parser("plugins", help="list, install or uninstall plugins")
    plugins.add_argument("action", nargs="?", choices=["list", "install", "uninstall"],
                         default="list")
    plugins.add_argument("name", nargs="?", help="distribution to (un)install with pip")
    plugins.add_argument("--json", action="store_true")
    plugins.set_defaults(func=cmd_plugins)
