"""``lemon plugins``: list the plugins lemoncore found (status, version, recipes, hooks,
tiers, errors and warnings), pip-install / uninstall one into lemoncore's own
environment, or create a new plugin project (``new``, :mod:`lemoncore.scaffold`).
Uninstalling imports no plugin, so a broken plugin cannot stop its own removal.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from lemoncore.cli.common import core_from, print_result

if TYPE_CHECKING:
    from lemoncore.cli.common import Subparsers


def cmd_plugins(args: argparse.Namespace) -> int:
    if args.action == "new":
        return _new(args.name, args.kind, args.engine, args.dir)
    if args.action in {"install", "uninstall"}:
        return _pip(args.action, args.name)
    records = [r.as_dict() for r in core_from(args).plugins.records]

    def table() -> None:
        for r in records:
            print(
                f"{r['name']:<16} {r['status']:<9} {r['version']:<10} "
                f"{','.join(r['recipes']) or '-'}"
            )
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
    argv = [sys.executable, "-m", "pip", action, *(["-y"] if action == "uninstall" else []), name]
    return subprocess.run(argv, check=False).returncode


CONTAINER_UNSUPPORTED = (
    "lemon plugins new: no container template yet. lemon-plugin-oci's container machinery "
    "(launch contracts, trusted image namespaces, digest pins) is that plugin's own code, "
    "not an API another plugin can use, and a generated project could not pass its tests "
    "without pulling an image. Use --engine python or native, and return a Runner from "
    "launch for a container (docs/reference.md#runner; plugins/oci shows one)."
)


def _new(name: str | None, kind: str, engine: str | None, directory: str | None) -> int:
    """Create a plugin project (:func:`lemoncore.scaffold.create`) and say what next."""
    from pathlib import Path

    from lemoncore import __version__
    from lemoncore.scaffold import ScaffoldError, create, engine_for

    if not name:
        print(
            "usage: lemon plugins new NAME [--kind chat|speech] [--engine native|python] "
            "[--dir DIR]",
            file=sys.stderr,
        )
        return 2
    if engine == "container":
        print(CONTAINER_UNSUPPORTED, file=sys.stderr)
        return 2
    target = Path(directory or f"lemon-plugin-{name.replace('_', '-')}")
    try:
        engine = engine_for(kind, engine)
        written = create(name, engine, target, __version__, kind)
    except (ScaffoldError, OSError) as exc:
        print(f"lemon plugins new: {exc}", file=sys.stderr)
        return 2
    print(
        f"created {target} ({kind}, {engine} engine, {len(written)} files). Next:\n"
        f"  cd {target}\n"
        + ("  apt install espeak-ng  # or dnf/brew install espeak-ng\n" if kind == "speech" else "")
        + '  pip install -e ".[test]"\n'
        f"  lemon backends        # lists {name}:cpu\n"
        "  python -m pytest      # its tests and the conformance kit\n"
        "  mypy                  # strict"
    )
    return 0


def add_plugins(sub: Subparsers) -> None:
    plugins = sub.add_parser(
        "plugins", help="list, install or uninstall plugins, or create a new one"
    )
    plugins.add_argument(
        "action", nargs="?", choices=["list", "install", "uninstall", "new"], default="list"
    )
    plugins.add_argument(
        "name",
        nargs="?",
        help="distribution to (un)install with pip; for "
        "new, the plugin's name (lower case, e.g. myengine)",
    )
    plugins.add_argument(
        "--kind",
        choices=["chat", "speech"],
        default="chat",
        help="new: what the backend serves: chat (the OpenAI core: chat, completions) or "
        "speech (text to speech, /v1/audio/speech, with espeak-ng)",
    )
    plugins.add_argument(
        "--engine",
        choices=["native", "python", "container"],
        default=None,
        help="new: a binary launched directly (native, chat's default) "
        "or a Python module run with -m (python, speech's only one); container is not "
        "templated yet",
    )
    plugins.add_argument(
        "--dir", help="new: the project directory to create (default: ./lemon-plugin-NAME)"
    )
    plugins.add_argument("--json", action="store_true")
    plugins.set_defaults(func=cmd_plugins)
