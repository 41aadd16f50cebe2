"""``lemon backends`` and ``lemon tiers``: list every recipe's backends with their state,
install one (verified download, experimental-tier consent, ``--trust-download`` to pin a
hash the publisher does not give, the ROCm runtime as a target of its own), uninstall one,
and ``migrate`` away what earlier installs left that backends now replace; ``tiers`` shows
each backend's tier, the promotion criteria it meets, and the verdict.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lemoncore.cli.common import core_from, print_result, progress_bar

if TYPE_CHECKING:
    from lemoncore.cli.common import Subparsers


def cmd_tiers(args: argparse.Namespace) -> int:
    """Per backend: its tier, which promotion criteria it meets, and the verdict; with
    ``--evidence FILE``, what a validation report shows toward them (never a verdict)."""
    from lemoncore.tiers import CRITERIA, assess, claims, evidence_for

    if args.evidence is not None:
        return _report_evidence(args)
    core = core_from(args)
    distributions = {r.name: r.distribution for r in core.plugins.records}
    rows = []
    for recipe in core.plugins.registry.recipes.values():
        for backend in recipe.backends:
            name = f"{recipe.name}:{backend.name}"
            result = assess(backend.tier, evidence_for(name))
            owner = core.plugins.owner(recipe, backend) or ""
            rows.append(
                {
                    "backend": name,
                    "tier": backend.tier.value,
                    "criteria": result.criteria,
                    "verdict": result.verdict,
                    "claims": claims(distributions.get(owner, "") or owner),
                }
            )

    def table() -> None:
        width = max((len(r["verdict"]) for r in rows), default=0)
        for r in rows:
            met = " ".join(("+" if r["criteria"][c] else "-") + c for c in CRITERIA)
            print(f"{r['backend']:<22} {r['tier']:<12} {r['verdict']:<{width}} {met}")
            if r["claims"]:
                said = ", ".join(f"{k} {v}" for k, v in r["claims"].items())
                print(f"{'':<22} the plugin claims (not evidence): {said}")

    print_result(rows, args.json, table)
    return 0


def _report_evidence(args: argparse.Namespace) -> int:
    """What a ``lemon validate`` report shows toward the criteria, beside the backend's
    verdict, which stays the registry's."""
    from dataclasses import asdict

    from lemoncore.tiers import CRITERIA, assess, evidence_for, evidence_from_report
    from lemoncore.validation.report import from_json

    try:
        found = evidence_from_report(from_json(args.evidence.read_text()))
    except (OSError, ValueError) as exc:
        print(f"lemon tiers --evidence {args.evidence}: {exc}", file=sys.stderr)
        return 2
    core = core_from(args)
    recipe_name, _, name = found.backend.partition(":")
    recipe = core.plugins.registry.recipes.get(recipe_name)
    backend = recipe.backend(name) if recipe is not None else None
    tier = backend.tier if backend is not None else None
    verdict = assess(tier, evidence_for(found.backend)).verdict if tier else "unknown backend here"
    row = {
        **asdict(found),
        "tier": tier.value if tier else "",
        "verdict": verdict,
        "note": "a report is evidence for review; verdicts change only through "
        "lemoncore's registry (lemoncore/data/tiers.json)",
    }

    def table() -> None:
        kind = "hardware evidence" if found.hardware else "NOT hardware evidence"
        print(
            f"{found.backend}: {kind}, {found.platform} ({', '.join(found.families)}), {found.date}"
        )
        print("  versions: " + ", ".join(f"{k} {v}" for k, v in found.versions.items()))
        for criterion in CRITERIA:
            print(f"  {criterion:<12} {found.shows[criterion]}")
        print(f"  verdict      {verdict} ({row['note']})")

    print_result(row, args.json, table)
    return 0


def cmd_backends(args: argparse.Namespace) -> int:
    core = core_from(args)
    if args.action == "migrate":
        return _migrate(core, args.target, args.yes, args.json)
    if args.action in {"install", "uninstall"}:
        if not args.target:
            print(f"usage: lemon backends {args.action} RECIPE:BACKEND", file=sys.stderr)
            return 2
        return (
            _install(core, args.target, args.yes, args.trust_download)
            if args.action == "install"
            else _uninstall(core, args.target)
        )
    rows = [
        {"recipe": recipe.name, "backend": s.backend.name, **s.as_dict()}
        for recipe in core.plugins.registry.recipes.values()
        for s in core.backends.statuses(recipe)
    ]

    def table() -> None:
        for r in rows:
            print(
                f"{r['recipe'] + ':' + r['backend']:<22} {r['state']:<16} {r['tier']:<12} "
                f"{r['format']:<9} {r['version']}"
            )
            for text in filter(None, [r["message"], r["action"] and f"fix: {r['action']}"]):
                print(f"    {text}")

    print_result(rows, args.json, table)
    return 0


def _migrate(core: Any, name: str | None, yes: bool, as_json: bool) -> int:
    """List what earlier installs left that backends now replace; remove one (by name)
    only with the user's word."""
    import shutil

    pending = core.plugins.migrations()
    if name is None:

        def table() -> None:
            for m in pending:
                print(
                    f"{m.name}: {m.message}\n    removes: {', '.join(map(str, m.paths))}\n"
                    f"    run: lemon backends migrate {m.name} --yes"
                )
            if not pending:
                print("nothing to migrate")

        print_result(
            [
                {"name": m.name, "message": m.message, "paths": [str(p) for p in m.paths]}
                for m in pending
            ],
            as_json,
            table,
        )
        return 0
    chosen = [m for m in pending if m.name == name]
    if not chosen:
        print(f"nothing to migrate for {name!r}", file=sys.stderr)
        return 1
    for migration in chosen:
        print(
            f"{migration.message}\nThis removes: {', '.join(map(str, migration.paths))}",
            file=sys.stderr,
        )
        if not yes:
            if not sys.stdin.isatty():
                print("Run again with --yes to remove it.", file=sys.stderr)
                return 1
            if input("Remove it? [y/N] ").strip().lower() not in {"y", "yes"}:
                return 1
        try:
            for path in migration.paths:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(
                    missing_ok=True
                )
        except OSError as exc:
            print(
                f"could not remove it: {exc} (an install made as root needs sudo)", file=sys.stderr
            )
            return 1
        print(f"{name}: migrated", file=sys.stderr)
    return 0


def _install(core: Any, target: str, yes: bool, trust_download: bool = False) -> int:
    import anyio

    from lemoncore.api.manage import tier_notice
    from lemoncore.errors import InstallError
    from lemoncore.installs.backends import THEROCK, BackendError
    from lemoncore.installs.install import provenance

    try:
        if trust_download:
            for trusted in anyio.run(core.backends.trust_download, target, progress_bar(target)):
                print(
                    f"\n{target}: trusted on first use and pinned in "
                    f"{core.backends.trust_file}:\n  {trusted.url}\n  SHA-256 "
                    f"{trusted.sha256}\n  {trusted.size} bytes",
                    file=sys.stderr,
                )
        if target == THEROCK:
            decision = anyio.run(core.backends.rocm.install, progress_bar(target))
            print(
                f"\n{target}: ROCm runtime is {decision.source} {decision.version} at "
                f"{decision.root}",
                file=sys.stderr,
            )
            return 0
        status = core.backends.status(*core.backends.lookup(target))
        consent = yes
        if core.backends.needs_consent(status) and not yes:
            if not sys.stdin.isatty():
                print(
                    f"{target} is experimental: community-developed, use at your own risk. "
                    "Run again with --yes to consent.",
                    file=sys.stderr,
                )
                return 1
            answer = input(
                f"{target} is experimental: community-developed, use at your own "
                "risk. Install it? [y/N] "
            )
            consent = answer.strip().lower() in {"y", "yes"}
            if not consent:
                return 1
        if notice := tier_notice(status.backend.tier):
            print(notice, file=sys.stderr)
        status = anyio.run(core.backends.ensure_installed, status, progress_bar(target), consent)
    except (BackendError, InstallError) as exc:
        print(f"\n{exc}", file=sys.stderr)
        return 1
    how = provenance(status.install_plan) if status.install_plan else "installed"
    print(f"\n{target}: installed {status.version} in {status.install_dir}; {how}", file=sys.stderr)
    return 0


def _uninstall(core: Any, target: str) -> int:
    import anyio

    removed = anyio.run(core.backends.uninstall, target)
    print(
        f"{target}: {'removed' if removed else 'was not installed by lemoncore'}", file=sys.stderr
    )
    return 0


def add_tiers(sub: Subparsers) -> None:
    tiers = sub.add_parser("tiers", help="promotion criteria per backend")
    tiers.add_argument(
        "--evidence",
        type=Path,
        metavar="FILE",
        help="a lemon validate report.json: what it shows toward the "
        "criteria (it never changes a verdict)",
    )
    tiers.add_argument("--json", action="store_true")
    tiers.set_defaults(func=cmd_tiers)


def add_backends(sub: Subparsers) -> None:
    backends = sub.add_parser("backends", help="list or install backends")
    backends.add_argument(
        "action", nargs="?", choices=["list", "install", "uninstall", "migrate"], default="list"
    )
    backends.add_argument("target", nargs="?", help="RECIPE:BACKEND")
    backends.add_argument(
        "--yes", action="store_true", help="consent to installing an experimental backend"
    )
    backends.add_argument(
        "--trust-download",
        dest="trust_download",
        action="store_true",
        help="pin the SHA-256 of a download whose publisher gives none, on first use",
    )
    backends.add_argument("--json", action="store_true")
    backends.set_defaults(func=cmd_backends)
