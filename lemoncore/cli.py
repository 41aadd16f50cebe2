"""The ``lemon`` command line: serve, plugins, backends, models, pull."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from lemoncore.settings import Settings

if TYPE_CHECKING:
    from starlette.applications import Starlette

STARTED = time.perf_counter()
log = structlog.get_logger("lemoncore.cli")


def _settings(args: argparse.Namespace) -> Settings:
    flags = {k: v for k, v in vars(args).items()
             if v is not None and k in Settings.model_fields}
    return Settings(**flags)


def _print(data: Any, as_json: bool, table: Callable[[], None]) -> None:
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        table()


def cmd_serve(args: argparse.Namespace) -> int:
    from lemoncore.app import create_app
    from lemoncore.logs import configure_logging

    settings = _settings(args)
    configure_logging(settings.log_format, settings.log_level)
    if settings.host not in {"127.0.0.1", "localhost", "::1"} and settings.api_key is None:
        log.warning("binding beyond loopback without an API key: anyone who can reach this "
                    "address can use the server; set LEMON_API_KEY", host=settings.host)
    serve_app(create_app(settings))
    return 0


def serve_app(app: Starlette) -> None:
    """Serve a :func:`~lemoncore.app.create_app` app with Hypercorn until SIGINT/SIGTERM.

    On the signal the router refuses new requests and gives in-flight ones ``stop_grace``
    seconds (streams then end with an error frame); Hypercorn's own grace is a second
    longer, so those answers still reach their clients. Then every backend is stopped.
    """
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    from lemoncore.app import core_of

    core = core_of(app)
    settings = core.settings
    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = None
    config.graceful_timeout = settings.stop_grace + 1

    async def main() -> None:
        stop = anyio.Event()
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async def watch() -> None:
                async for _ in signals:
                    core.router.begin_shutdown()
                    stop.set()
                    return

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                log.info("serving", url=f"http://{settings.host}:{settings.port}/v1",
                         startup_seconds=round(time.perf_counter() - STARTED, 3))
                await serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
                tg.cancel_scope.cancel()

    anyio.run(main)


def _core(args: argparse.Namespace) -> Any:
    from lemoncore.core import build_core

    return build_core(_settings(args))


def cmd_plugins(args: argparse.Namespace) -> int:
    if args.action in {"install", "uninstall"}:
        return _pip(args.action, args.name)
    records = [r.as_dict() for r in _core(args).plugins.records]

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

    _print(records, args.json, table)
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


def cmd_tiers(args: argparse.Namespace) -> int:
    """Per backend: its tier, which promotion criteria it meets, and the verdict."""
    from lemoncore.tiers import CRITERIA, assess, evidence_for

    core = _core(args)
    rows = []
    for recipe in core.plugins.registry.recipes.values():
        for backend in recipe.backends:
            name = f"{recipe.name}:{backend.name}"
            result = assess(backend.tier, evidence_for(name))
            rows.append({"backend": name, "tier": backend.tier.value,
                         "criteria": result.criteria, "verdict": result.verdict})

    def table() -> None:
        for r in rows:
            met = " ".join(("+" if r["criteria"][c] else "-") + c for c in CRITERIA)
            print(f"{r['backend']:<22} {r['tier']:<12} {r['verdict']:<36} {met}")

    _print(rows, args.json, table)
    return 0


def cmd_backends(args: argparse.Namespace) -> int:
    core = _core(args)
    if args.action == "migrate":
        return _migrate(core, args.target, args.yes, args.json)
    if args.action in {"install", "uninstall"}:
        if not args.target:
            print(f"usage: lemon backends {args.action} RECIPE:BACKEND", file=sys.stderr)
            return 2
        return _install(core, args.target, args.yes, args.trust_download) \
            if args.action == "install" else _uninstall(core, args.target)
    rows = [{"recipe": recipe.name, "backend": s.backend.name, **s.as_dict()}
            for recipe in core.plugins.registry.recipes.values()
            for s in core.backends.statuses(recipe)]

    def table() -> None:
        for r in rows:
            print(f"{r['recipe'] + ':' + r['backend']:<22} {r['state']:<16} {r['tier']:<12} "
                  f"{r['format']:<9} {r['version']}")
            for text in filter(None, [r["message"], r["action"] and f"fix: {r['action']}"]):
                print(f"    {text}")

    _print(rows, args.json, table)
    return 0


def _migrate(core: Any, name: str | None, yes: bool, as_json: bool) -> int:
    """List what earlier installs left that backends now replace; remove one (by name)
    only with the user's word."""
    import shutil

    pending = core.plugins.migrations()
    if name is None:
        def table() -> None:
            for m in pending:
                print(f"{m.name}: {m.message}\n    removes: {', '.join(map(str, m.paths))}\n"
                      f"    run: lemon backends migrate {m.name} --yes")
            if not pending:
                print("nothing to migrate")

        _print([{"name": m.name, "message": m.message, "paths": [str(p) for p in m.paths]}
                for m in pending], as_json, table)
        return 0
    chosen = [m for m in pending if m.name == name]
    if not chosen:
        print(f"nothing to migrate for {name!r}", file=sys.stderr)
        return 1
    for migration in chosen:
        print(f"{migration.message}\nThis removes: {', '.join(map(str, migration.paths))}",
              file=sys.stderr)
        if not yes:
            if not sys.stdin.isatty():
                print("Run again with --yes to remove it.", file=sys.stderr)
                return 1
            if input("Remove it? [y/N] ").strip().lower() not in {"y", "yes"}:
                return 1
        try:
            for path in migration.paths:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else \
                    path.unlink(missing_ok=True)
        except OSError as exc:
            print(f"could not remove it: {exc} (an install made as root needs sudo)",
                  file=sys.stderr)
            return 1
        print(f"{name}: migrated", file=sys.stderr)
    return 0


def progress_bar(label: str) -> Callable[[int, int], None]:
    """A one-line progress bar on stderr."""
    def show(done: int, total: int) -> None:
        if total:
            filled = int(30 * done / total)
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] {100 * done / total:5.1f}% "
        else:
            bar = ""
        print(f"\r{label} {bar}{done / 1e6:.1f}/{total / 1e6:.1f} MB", end="",
              file=sys.stderr, flush=True)
    return show


def _install(core: Any, target: str, yes: bool, trust_download: bool = False) -> int:
    from lemoncore.api.manage import tier_notice
    from lemoncore.backends import THEROCK, BackendError
    from lemoncore.install import InstallError

    try:
        if trust_download:
            for trusted in anyio.run(core.backends.trust_download, target,
                                     progress_bar(target)):
                print(f"\n{target}: trusted on first use and pinned in "
                      f"{core.backends.trust_file}:\n  {trusted.url}\n  SHA-256 "
                      f"{trusted.sha256}\n  {trusted.size} bytes", file=sys.stderr)
        if target == THEROCK:
            decision = anyio.run(core.backends.install_therock, progress_bar(target))
            print(f"\n{target}: ROCm runtime is {decision.source} {decision.version} at "
                  f"{decision.root}", file=sys.stderr)
            return 0
        status = core.backends.status(*core.backends.lookup(target))
        consent = yes
        if core.backends.needs_consent(status) and not yes:
            if not sys.stdin.isatty():
                print(f"{target} is experimental: community-developed, use at your own risk. "
                      "Run again with --yes to consent.", file=sys.stderr)
                return 1
            answer = input(f"{target} is experimental: community-developed, use at your own "
                           "risk. Install it? [y/N] ")
            consent = answer.strip().lower() in {"y", "yes"}
            if not consent:
                return 1
        if notice := tier_notice(status.backend.tier):
            print(notice, file=sys.stderr)
        status = anyio.run(core.backends.ensure_installed, status, progress_bar(target),
                           consent)
    except (BackendError, InstallError) as exc:
        print(f"\n{exc}", file=sys.stderr)
        return 1
    print(f"\n{target}: installed {status.version} (verified) in {status.install_dir}",
          file=sys.stderr)
    return 0


def _uninstall(core: Any, target: str) -> int:
    removed = anyio.run(core.backends.uninstall, target)
    print(f"{target}: {'removed' if removed else 'was not installed by lemoncore'}",
          file=sys.stderr)
    return 0


def cmd_lock(args: argparse.Namespace) -> int:
    """Every pinned artifact of the merged lock, with how its hash was obtained; or, with
    ``refresh``, what each pin's publisher points at now."""
    if args.action == "refresh":
        return _refresh(_core(args), args.targets, args.yes, args.check, args.json)
    rows = [{"name": name, "version": version, "platform": key, "url": a.url,
             "sha256": a.sha256, "provenance": a.provenance}
            for name, version, key, a in _core(args).backends.lock.artifacts()]

    def table() -> None:
        for r in rows:
            print(f"{r['name']:<20} {r['version']:<10} {r['platform']:<16} "
                  f"{r['sha256'] or 'UNVERIFIED (no hash pinned)'}\n    {r['url']}\n"
                  f"    provenance: {r['provenance'] or '-'}")

    _print(rows, args.json, table)
    return 0


def _refresh(core: Any, targets: list[str], yes: bool, check: bool, as_json: bool) -> int:
    """Show old -> new per pin; record the new ones only on the administrator's word;
    ``check``: exit 1 when a pin is stale or a publisher could not be asked (for CI)."""
    from lemoncore import refresh
    from lemoncore.backends import BackendError
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

    _print([r.as_dict() for r in found], as_json, table)
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
    print(f"pinned in {path}: {', '.join(r.name for r in stale)}; a running server reads "
          "it when it next starts; install with 'lemon backends install NAME'",
          file=sys.stderr)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    core = _core(args)
    rows = [{"name": m.name, "recipe": m.recipe, "checkpoint": m.checkpoint,
             "downloaded": core.models.local_path(m) is not None}
            for m in core.models.all().values()]
    rows = [r for r in rows if args.all or r["downloaded"]]

    def table() -> None:
        for r in rows:
            mark = "*" if r["downloaded"] else " "
            print(f"{mark} {r['name']:<32} {r['recipe']:<10} {r['checkpoint']}")

    _print(rows, args.json, table)
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    from lemoncore.models import ModelError
    from lemoncore.recipes import ModelInfo

    core = _core(args)
    try:
        if args.checkpoint:
            core.models.register(ModelInfo(name=args.name, recipe=args.recipe,
                                           checkpoint=args.checkpoint))
        model = core.models.get(args.name)
        if model is None:
            raise ModelError(f"unknown model {args.name!r}; give --checkpoint and --recipe")
        path = anyio.run(core.models.pull, model)
    except ModelError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(path)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """Ask a running server what loading a model would do, without doing it."""
    import httpx

    options: dict[str, Any] = {}
    for item in args.option:
        key, _, value = item.partition("=")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    url = args.server or f"http://127.0.0.1:{Settings().port}"
    try:
        response = httpx.post(f"{url}/api/v1/load", timeout=30,
                              json={"model_name": args.model, "dry_run": True, **options})
    except httpx.TransportError as exc:
        print(f"no lemoncore server at {url} ({exc}); start one with 'lemon serve'",
              file=sys.stderr)
        return 1
    plan = response.json()
    if response.status_code != 200:
        print(plan["error"]["message"], file=sys.stderr)
        return 1

    def text() -> None:
        print(f"{plan['model_name']}: {plan['recipe']}:{plan['backend']} "
              f"({plan['backend_state']}) on {plan['device']}"
              f"{' (AMD GPU)' if plan['is_amd_gpu'] else ''}, policy {plan['slot_policy']}")
        print(f"  options: {json.dumps(plan['options'])}")
        if plan["already_loaded"]:
            print("  already loaded with these options: nothing to do")
        elif plan["refused"]:
            print(f"  refused: {plan['refused']}")
        for e in plan["evict"]:
            print(f"  evicts {e['model_name']} [{e['kind']}]: {e['reason']}")
        if not plan["evict"] and not plan["refused"] and not plan["already_loaded"]:
            print("  evicts nothing")

    _print(plan, args.json, text)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Measure models on a running server: TTFT, decode and prompt tokens/s, warm and cold."""
    import os

    import httpx

    from lemoncore.bench import bench, targets

    url = args.server or f"http://127.0.0.1:{Settings().port}"
    key = os.environ.get("LEMON_ADMIN_API_KEY") or os.environ.get("LEMON_API_KEY")
    try:
        report = bench(url, targets(args.models, args.backend), args.reps,
                       not args.warm_only, args.max_tokens, key)
    except (httpx.HTTPError, RuntimeError) as exc:
        print(f"benchmark against {url} failed: {exc}", file=sys.stderr)
        return 1

    def table() -> None:
        print(f"{'model':<40} {'run':<6} {'TTFT p50 ms':>12} {'decode tok/s':>13} "
              f"{'prompt tok/s':>13}   (p10-p90)")
        for model, runs in report.items():
            assert isinstance(runs, dict)
            if "skipped" in runs:
                print(f"{model:<40} skipped: {runs['skipped']}")
                continue
            if "peak_memory_mib" in runs:
                print(f"{model:<40} peak host memory {runs.pop('peak_memory_mib')} MiB "
                      "(GPU memory not counted)")
            for run, r in runs.items():
                t, d, p = r["ttft_ms"], r["decode_tps"], r["prompt_tps"]
                print(f"{model:<40} {run:<6} {t['p50']:>12.1f} {d['p50']:>13.1f} "
                      f"{p['p50']:>13.1f}   ({t['p10']:.0f}-{t['p90']:.0f} ms, "
                      f"{d['p10']:.0f}-{d['p90']:.0f} tok/s)")

    _print(report, args.json, table)
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    """Start a coding agent against this server; with several models or backends (or
    ``--out``), run it non-interactively once per target and compare the runs."""
    import datetime
    import os
    import shlex
    import shutil
    import subprocess

    import httpx

    from lemoncore.agent_runs import run_all
    from lemoncore.agents import AGENTS, agent_command
    from lemoncore.bench import client_for, select
    from lemoncore.bench import targets as bench_targets

    agent = AGENTS.get(args.agent)
    if agent is None:
        print(f"unknown agent {args.agent!r}; supported: {', '.join(sorted(AGENTS))}",
              file=sys.stderr)
        return 2
    binary = shutil.which(agent.binary)
    if binary is None:
        print(f"{args.agent} is not installed; install it with: {agent.install}",
              file=sys.stderr)
        return 127
    url = args.server or f"http://127.0.0.1:{Settings().port}"
    ids = []
    for model in args.model:
        try:
            found = httpx.get(f"{url}/v1/models/{model}", timeout=10)
        except httpx.TransportError:
            print(f"no lemoncore server at {url}; start one with 'lemon serve'", file=sys.stderr)
            return 1
        if found.status_code != 200:
            print(found.json()["error"]["message"], file=sys.stderr)
            return 1
        ids.append(found.json()["id"])
    extra = [*shlex.split(args.agent_args or ""), *args.passthrough]
    key = os.environ.get("LEMON_API_KEY", "lemoncore")  # the agent's: never the admin key
    admin = os.environ.get("LEMON_ADMIN_API_KEY") or os.environ.get("LEMON_API_KEY")
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
        argv, env = agent_command(agent, f"{url}/v1", ids[0], key, extra)
        return subprocess.run([binary, *argv[1:]], env={**os.environ, **env},
                              check=False).returncode
    if not extra:
        print(f"{args.agent} needs its non-interactive form for comparison runs: "
              f"{agent.batch}", file=sys.stderr)
        return 2
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    out = Path(args.out or f"lemon-launch-{args.agent}-{stamp}")
    rows = run_all(url, agent, binary, targets, extra, out, key, admin, args.timeout)

    def table() -> None:
        print(f"{'target':<40} {'exit':>5} {'wall s':>8} {'tokens':>8}  output")
        for r in rows:
            exit_code = "-" if r.get("exit_code") is None else r["exit_code"]
            print(f"{r['target']:<40} {exit_code:>5} {r.get('wall_s', '-'):>8} "
                  f"{r.get('tokens') or '-':>8}  {r.get('error') or r.get('output', '')}")
        print(f"results: {out / 'results.json'}")

    _print(rows, args.json, table)
    return 0 if all(r.get("exit_code") == 0 for r in rows) else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lemon", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--max-loaded-models", dest="max_loaded_models", type=int)
    serve.add_argument("--log-format", dest="log_format", choices=["console", "json"])
    serve.add_argument("--log-level", dest="log_level",
                       choices=["debug", "info", "warning", "error"])
    serve.add_argument("--offline", action="store_true", default=None)
    serve.set_defaults(func=cmd_serve)
    plugins = sub.add_parser("plugins", help="list, install or uninstall plugins")
    plugins.add_argument("action", nargs="?", choices=["list", "install", "uninstall"],
                         default="list")
    plugins.add_argument("name", nargs="?", help="distribution to (un)install with pip")
    plugins.set_defaults(func=cmd_plugins)
    tiers = sub.add_parser("tiers", help="promotion criteria per backend")
    tiers.set_defaults(func=cmd_tiers)
    backends = sub.add_parser("backends", help="list or install backends")
    backends.add_argument("action", nargs="?",
                          choices=["list", "install", "uninstall", "migrate"],
                          default="list")
    backends.add_argument("target", nargs="?", help="RECIPE:BACKEND")
    backends.add_argument("--yes", action="store_true",
                          help="consent to installing an experimental backend")
    backends.add_argument("--trust-download", dest="trust_download", action="store_true",
                          help="pin the SHA-256 of a download whose publisher gives none, "
                               "on first use")
    backends.set_defaults(func=cmd_backends)
    bench_p = sub.add_parser("bench", help="measure models on a running server; "
                                           "MODEL@BACKEND compares engines")
    bench_p.add_argument("models", nargs="+", help="MODEL or MODEL@BACKEND")
    bench_p.add_argument("--backend", help="backend for the models named without one")
    bench_p.add_argument("--reps", type=int, default=5)
    bench_p.add_argument("--max-tokens", dest="max_tokens", type=int, default=96)
    bench_p.add_argument("--warm-only", action="store_true", help="skip cold starts")
    bench_p.add_argument("--server", help="server URL (default: http://127.0.0.1:<port>)")
    bench_p.set_defaults(func=cmd_bench)
    launch = sub.add_parser("launch", help="start a coding agent wired to this server; "
                                           "arguments after -- go to the agent")
    launch.add_argument("agent", help="opencode, pi, claude or codex")
    launch.add_argument("-m", "--model", required=True, action="append",
                        help="a model; repeat to compare models")
    launch.add_argument("--backend", action="append",
                        help="run on this backend; repeat to compare backends")
    launch.add_argument("--agent-args", dest="agent_args",
                        help='the agent\'s arguments, e.g. --agent-args="-p \'TASK\'"')
    launch.add_argument("--out", type=Path, help="results directory (comparison runs)")
    launch.add_argument("--timeout", type=float, default=1800,
                        help="seconds one agent run may take (comparison runs)")
    launch.add_argument("--server", help="server URL (default: http://127.0.0.1:<port>)")
    launch.set_defaults(func=cmd_launch)
    lock = sub.add_parser("lock", help="every pinned artifact and its provenance; "
                                       "'refresh' asks publishers for new digests")
    lock.add_argument("action", nargs="?", choices=["list", "refresh"], default="list")
    lock.add_argument("targets", nargs="*", help="RECIPE:BACKEND (refresh; default: all)")
    lock.add_argument("--yes", action="store_true", help="pin new digests without asking")
    lock.add_argument("--check", action="store_true",
                      help="only report; exit 1 when a pin is stale (for CI)")
    lock.set_defaults(func=cmd_lock)
    models = sub.add_parser("models", help="list models")
    models.add_argument("--all", action="store_true", help="include models not downloaded")
    models.set_defaults(func=cmd_models)
    pull = sub.add_parser("pull", help="download a model (registering it if new)")
    pull.add_argument("name")
    pull.add_argument("--checkpoint")
    pull.add_argument("--recipe", default="llamacpp")
    pull.set_defaults(func=cmd_pull)
    explain = sub.add_parser("explain", help="what loading MODEL would evict, and why")
    explain.add_argument("model")
    explain.add_argument("-o", "--option", action="append", default=[],
                         help="a load option, e.g. -o backend=cpu -o ctx_size=8192")
    explain.add_argument("--server", help="server URL (default: http://127.0.0.1:<port>)")
    explain.set_defaults(func=cmd_explain)
    for sp in (plugins, backends, models, explain, lock, tiers, bench_p, launch):
        sp.add_argument("--json", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Everything after ``--`` goes to the launched agent untouched."""
    words = list(sys.argv[1:] if argv is None else argv)
    cut = words.index("--") if "--" in words else len(words)
    args = parser().parse_args(words[:cut])
    args.passthrough = words[cut + 1:]
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
