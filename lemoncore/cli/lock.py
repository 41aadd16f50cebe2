"""``lemon lock``: every pinned artifact of the merged lock (name, version, platform, URL,
SHA-256) with how its hash was obtained; ``lemon lock refresh`` asks each publisher what
a pin points at now, shows old -> new, and records new digests only on the
administrator's word (``--check`` only reports, exiting 1 on a stale pin, for CI).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from lemoncore.cli.common import core_from, print_result

if TYPE_CHECKING:
    from lemoncore.cli.common import Subparsers


def cmd_lock(args: argparse.Namespace) -> int:
    """Every pinned artifact of the merged lock, with how its hash was obtained; or, with
    ``refresh``, what each pin's publisher points at now."""
    if args.action == "refresh":
        return _refresh(core_from(args), args.targets, args.yes, args.check, args.json)
    rows = [
        {
            "name": name,
            "version": version,
            "platform": key,
            "url": a.url,
            "sha256": a.sha256,
            "provenance": a.provenance,
        }
        for name, version, key, a in core_from(args).backends.lock.artifacts()
    ]

    def table() -> None:
        for r in rows:
            print(
                f"{r['name']:<20} {r['version']:<10} {r['platform']:<16} "
                f"{r['sha256'] or 'UNVERIFIED (no hash pinned)'}\n    {r['url']}\n"
                f"    provenance: {r['provenance'] or '-'}"
            )

    print_result(rows, args.json, table)
    return 0


def _refresh(core: Any, targets: list[str], yes: bool, check: bool, as_json: bool) -> int:
    """Show old -> new per pin; record the new ones only on the administrator's word;
    ``check``: exit 1 when a pin is stale or a publisher could not be asked (for CI)."""
    import anyio

    from lemoncore.installs import refresh
    from lemoncore.installs.backends import BackendError
    from lemoncore.plugins import PluginError

    try:
        found = anyio.run(core.backends.refresh, targets)
    except (BackendError, PluginError) as exc:
        print(exc, file=sys.stderr)
        return 1
    stale = [r for r in found if r.stale]

    def table() -> None:
        for r in found:
            state = f"ERROR: {r.error}" if r.error else "STALE" if r.stale else "current"
            new = r.new.url if r.new is not None else "-"
            print(f"{r.name:<20} {state}\n    pinned: {r.old.url}\n    now:    {new}")

    print_result([r.as_dict() for r in found], as_json, table)
    if check:
        return 1 if stale or any(r.error for r in found) else 0
    if not stale:
        return 0
    if not yes:
        if not sys.stdin.isatty():
            print("Run again with --yes to pin the new digests.", file=sys.stderr)
            return 1
        print(f"Pin {len(stale)} new digest(s)? [y/N] ", end="", file=sys.stderr, flush=True)
        if input().strip().lower() not in {"y", "yes"}:
            return 1
    path = core.settings.cache_dir / refresh.REFRESH_FILE
    refresh.save(path, stale)
    print(
        f"pinned in {path}: {', '.join(r.name for r in stale)}; a running server reads "
        "it when it next starts; install with 'lemon backends install NAME'",
        file=sys.stderr,
    )
    return 0


def add_lock(sub: Subparsers) -> None:
    lock = sub.add_parser(
        "lock",
        help="every pinned artifact and its provenance; 'refresh' asks publishers for new digests",
    )
    lock.add_argument("action", nargs="?", choices=["list", "refresh"], default="list")
    lock.add_argument("targets", nargs="*", help="RECIPE:BACKEND (refresh; default: all)")
    lock.add_argument("--yes", action="store_true", help="pin new digests without asking")
    lock.add_argument(
        "--check", action="store_true", help="only report; exit 1 when a pin is stale (for CI)"
    )
    lock.add_argument("--json", action="store_true")
    lock.set_defaults(func=cmd_lock)
