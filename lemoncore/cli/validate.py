"""``lemon validate BACKEND``: turn this machine into the backend's test bench. Runs the
conformance kit, the backend's field checks and a short benchmark against a real model
with the real installed backend, on the validation's own server, and writes a report
(``report.json``, ``report.md``, ``server.log``) for the user to share, or not: nothing
is sent anywhere. ``--json`` prints one summary line for scripts. See docs/validation.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lemoncore.cli.common import progress_bar, settings_from

if TYPE_CHECKING:
    from lemoncore.cli.common import Subparsers
    from lemoncore.validation.run import Run


def _ask(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in {"y", "yes"}


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cmd_validate(args: argparse.Namespace, run: Run | None = None) -> int:
    """Validate ``args.backend``; exit 0 when every check passed, 1 when one failed, 2
    when validation could not start. ``run`` replaces the defaults (tests)."""
    from lemoncore.validation import report as reports
    from lemoncore.validation.run import Options, Refused, secrets, validate
    from lemoncore.validation.run import Run as RunWith

    run = run or RunWith(settings=settings_from(args), ask=_ask, progress=progress_bar)
    if not args.json:
        run.say = _say
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    out = Path(args.out or f"lemon-validate-{args.backend.replace(':', '-')}-{stamp}")
    options = Options(args.backend, args.model, args.quick, args.yes)
    try:
        report = validate(options, run, out / "server.log")
    except Refused as exc:
        print(f"lemon validate: {exc}", file=sys.stderr)
        return 2
    home, hidden = str(Path.home()), secrets(run.settings)
    (out / "report.json").write_text(reports.to_json(report, home, hidden))
    (out / "report.md").write_text(reports.to_markdown(report, home, hidden))
    log = out / "server.log"
    if log.exists():  # kept for the user; redacted like the report, in case it is shared
        log.write_text(reports.redact(log.read_text(errors="replace"), home, hidden))
    if args.json:
        print(json.dumps(report.summary(reports.redact(str(out / "report.json"), home))))
    else:
        verdict = "passed" if report.passed else "FAILED"
        counts = ", ".join(f"{n} {k}" for k, n in report.counts.items())
        standin = " (stand-in: not hardware evidence)" if report.standins else ""
        print(
            f"{args.backend}: {verdict}{standin}; {counts}\nreport: {out / 'report.md'} "
            f"(and report.json); nothing was sent anywhere. To help, attach report.json "
            f"to an issue on the project (see the plugin's README)"
        )
    return 0 if report.passed else 1


def add_validate(sub: Subparsers) -> None:
    validate = sub.add_parser(
        "validate", help="check a backend on this machine's hardware and write a shareable report"
    )
    validate.add_argument("backend", help="RECIPE:BACKEND, e.g. llamacpp:vulkan")
    validate.add_argument(
        "--model",
        help="the model to use (default: the backend's smallest catalogue model of a type "
        "it serves: a chat model when it serves chat)",
    )
    validate.add_argument(
        "--quick", action="store_true", help="a shorter benchmark (one warm run, no cold starts)"
    )
    validate.add_argument(
        "--out", type=Path, help="report directory (default: ./lemon-validate-RECIPE-BACKEND-TIME)"
    )
    validate.add_argument(
        "--yes",
        action="store_true",
        help="consent to installing the backend and downloading the model",
    )
    validate.add_argument("--json", action="store_true", help="print one summary line")
    validate.set_defaults(func=cmd_validate)
