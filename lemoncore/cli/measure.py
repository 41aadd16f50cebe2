"""Commands that put a running server to work and compare targets (``MODEL@BACKEND``):
``lemon bench`` measures TTFT and decode / prompt tokens per second, warm and cold, and
counts thinking and answer tokens apart (``--think``: a budget a reasoning model answers in);
``lemon launch`` starts a coding agent wired to the server, or, with several models or
backends (or ``--out``), runs it non-interactively once per target and tabulates the runs.
Both reach the server through :class:`~lemoncore.cli.remote.Remote`: its URL, and its keys
(the agent gets ``LEMON_API_KEY``, never the admin key; loads send the admin key).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lemoncore.cli.common import add_server_arg, print_result

if TYPE_CHECKING:
    from lemoncore.cli.common import Subparsers

LOAD, CHAT = "/api/v1/load", "/v1/chat/completions"  # routes whose keys bench and agents use


def cmd_bench(args: argparse.Namespace) -> int:
    """Measure models on a running server: TTFT, decode and prompt tokens/s, thinking and
    answer tokens, warm and cold; each step (which target, which prompt or cold start) a
    line on stderr as it starts. ``--think`` gives a reasoning model room to answer. Exit
    1 when the benchmark fails or a run has no measured sample (all refused)."""
    import httpx

    from lemoncore.bench import bench, budget, targets
    from lemoncore.cli.remote import Remote

    remote = Remote.from_args(args)
    max_tokens = budget(args.max_tokens, args.think)
    try:  # one client loads and asks: the admin key serves inference routes too
        report = bench(
            remote.url,
            targets(args.models, args.backend),
            args.reps,
            not args.warm_only,
            max_tokens,
            remote.key(LOAD),
            lambda step: print(f"bench: {step}", file=sys.stderr, flush=True),
            ignore_eos=not args.think,
        )
    except (httpx.HTTPError, RuntimeError) as exc:
        print(f"benchmark against {remote.url} failed: {exc}", file=sys.stderr)
        return 1

    def table() -> None:
        print(
            f"{'model':<40} {'run':<6} {'TTFT p50 ms':>12} {'decode tok/s':>13} "
            f"{'prompt tok/s':>13} {'think/answer':>13}   (p10-p90)"
        )
        for model, runs in report.items():
            assert isinstance(runs, dict)
            if "skipped" in runs:
                print(f"{model:<40} skipped: {runs['skipped']}")
                continue
            if "peak_memory_mib" in runs:
                print(
                    f"{model:<40} peak host memory {runs['peak_memory_mib']} MiB "
                    "(GPU memory not counted)"
                )
            for run, r in _runs(runs):
                t, d, p = r["ttft_ms"], r["decode_tps"], r["prompt_tps"]
                if not t["n"]:
                    reason = r["refused"][0] if r["refused"] else "no sample was taken"
                    print(f"{model:<40} {run:<6} refused: {reason}")
                    continue
                tokens = f"{r['thinking_tokens']['p50']:.0f}/{r['answer_tokens']['p50']:.0f}"
                print(
                    f"{model:<40} {run:<6} {t['p50']:>12.1f} {d['p50']:>13.1f} "
                    f"{p['p50']:>13.1f} {tokens:>13}   ({t['p10']:.0f}-{t['p90']:.0f} ms, "
                    f"{d['p10']:.0f}-{d['p90']:.0f} tok/s)"
                )
        for note in bench_notes(report, max_tokens, args.think):
            print(f"note: {note}")

    print_result(report, args.json, table)
    return 1 if unmeasured(report) else 0


def _runs(runs: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A target's runs (warm scenarios, ``cold``), without its other entries."""
    return [(run, r) for run, r in runs.items() if isinstance(r, dict)]


def bench_notes(report: dict[str, object], max_tokens: int, think: bool) -> list[str]:
    """What the table's numbers need said: per run, the samples whose budget the thinking
    spent (with the way to a larger one) and, where others were measured, the refused
    ones with the first reason (a run all refused says it in its row)."""
    notes = []
    for model, runs in report.items():
        if not isinstance(runs, dict) or "skipped" in runs:
            continue
        for run, r in _runs(runs):
            total = r["ttft_ms"]["n"] + len(r["refused"])
            if spent := r["exhausted_by_thinking"]:
                more = "a larger --max-tokens" if think else "--think or a larger --max-tokens"
                notes.append(
                    f"{model} {run}: thinking spent the whole budget ({max_tokens} tokens) "
                    f"in {spent} of {total} samples: finish_reason length, no answer; TTFT "
                    f"and decode count the thinking tokens; for the answer, {more}"
                )
            if (refused := r["refused"]) and r["ttft_ms"]["n"]:
                notes.append(
                    f"{model} {run}: {len(refused)} of {total} samples refused: {refused[0]}"
                )
    return notes


def unmeasured(report: dict[str, object]) -> list[str]:
    """The runs (``MODEL run``) with no measured sample: every one was refused."""
    return [
        f"{model} {run}"
        for model, runs in report.items()
        if isinstance(runs, dict) and "skipped" not in runs
        for run, r in _runs(runs)
        if not r["ttft_ms"]["n"]
    ]


def cmd_launch(args: argparse.Namespace) -> int:
    """Start a coding agent against this server, configured in a directory made for the
    run (:mod:`lemoncore.agents`); with several models or backends (or ``--out``), run it
    non-interactively once per target and compare the runs."""
    import datetime
    import os
    import shlex
    import shutil
    import subprocess

    import httpx

    from lemoncore.agent_runs import run_all
    from lemoncore.agents import AGENTS, agent_environment, wired
    from lemoncore.bench import client_for, select
    from lemoncore.bench import targets as bench_targets
    from lemoncore.cli.remote import Remote

    agent = AGENTS.get(args.agent)
    if agent is None:
        print(
            f"unknown agent {args.agent!r}; supported: {', '.join(sorted(AGENTS))}", file=sys.stderr
        )
        return 2
    binary = shutil.which(agent.binary)
    if binary is None:
        print(f"{args.agent} is not installed; install it with: {agent.install}", file=sys.stderr)
        return 127
    remote = Remote.from_args(args)
    url = remote.url
    ids = [remote.get(f"/v1/models/{model}", timeout=10)["id"] for model in args.model]
    extra = [*shlex.split(args.agent_args or ""), *args.passthrough]
    key = remote.key(CHAT) or "lemoncore"  # the agent's: never the admin key
    admin = remote.key(LOAD)
    targets = [t for b in (args.backend or [None]) for t in bench_targets(ids, b)]
    targets.sort(key=lambda t: ids.index(t.model))
    if agent.note:
        print(f"note: {args.agent} {agent.note}", file=sys.stderr)
    if len(targets) == 1 and args.out is None:
        try:
            if targets[0].backend:
                with client_for(admin) as client:
                    select(client, url, targets[0])
        except (httpx.HTTPError, RuntimeError) as exc:
            print(exc, file=sys.stderr)
            return 1
        with wired(agent, f"{url}/v1", ids[0], key, extra) as wiring:
            return subprocess.run(
                [binary, *wiring.argv[1:]], env=agent_environment(os.environ, wiring), check=False
            ).returncode
    if not extra:
        print(
            f"{args.agent} needs its non-interactive form for comparison runs: {agent.batch}",
            file=sys.stderr,
        )
        return 2
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    out = Path(args.out or f"lemon-launch-{args.agent}-{stamp}")
    rows = run_all(url, agent, binary, targets, extra, out, key, admin, args.timeout)

    def table() -> None:
        print(f"{'target':<40} {'exit':>5} {'wall s':>8} {'tokens':>8}  output")
        for r in rows:
            exit_code = "-" if r.get("exit_code") is None else r["exit_code"]
            print(
                f"{r['target']:<40} {exit_code:>5} {r.get('wall_s', '-'):>8} "
                f"{r.get('tokens') or '-':>8}  {r.get('error') or r.get('output', '')}"
            )
        print(f"results: {out / 'results.json'}")

    print_result(rows, args.json, table)
    return 0 if all(r.get("exit_code") == 0 for r in rows) else 1


def add_bench(sub: Subparsers) -> None:
    bench_p = sub.add_parser(
        "bench", help="measure models on a running server; MODEL@BACKEND compares engines"
    )
    bench_p.add_argument("models", nargs="+", help="MODEL or MODEL@BACKEND")
    bench_p.add_argument("--backend", help="backend for the models named without one")
    bench_p.add_argument("--reps", type=int, default=5)
    bench_p.add_argument(
        "--max-tokens",
        dest="max_tokens",
        type=int,
        help="each measured answer's budget (default 96; 1024 with --think)",
    )
    bench_p.add_argument(
        "--think",
        action="store_true",
        help="a reasoning model: a budget of 1024 tokens (unless --max-tokens says) that its "
        "thinking leaves room in, each answer ending at the model's end",
    )
    bench_p.add_argument("--warm-only", action="store_true", help="skip cold starts")
    add_server_arg(bench_p)
    bench_p.set_defaults(func=cmd_bench)


def add_launch(sub: Subparsers) -> None:
    launch = sub.add_parser(
        "launch",
        help="start a coding agent wired to this server; arguments after -- go to the agent",
    )
    launch.add_argument("agent", help="opencode, pi, claude or codex")
    launch.add_argument(
        "-m", "--model", required=True, action="append", help="a model; repeat to compare models"
    )
    launch.add_argument(
        "--backend", action="append", help="run on this backend; repeat to compare backends"
    )
    launch.add_argument(
        "--agent-args",
        dest="agent_args",
        help="the agent's arguments, e.g. --agent-args=\"-p 'TASK'\"",
    )
    launch.add_argument("--out", type=Path, help="results directory (comparison runs)")
    launch.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds one agent run may take (comparison runs)",
    )
    add_server_arg(launch)
    launch.set_defaults(func=cmd_launch)
