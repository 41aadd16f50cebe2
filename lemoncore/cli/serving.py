"""Commands that face the HTTP server: ``lemon serve`` runs it (Hypercorn, with a graceful
stop on a stop signal or ``POST /api/v1/shutdown``, via :func:`serve_app`, which tests and
other entry points reuse), and ``lemon explain`` asks a running one what loading a model
would do, without doing it (a dry-run load: a management route, so it sends the admin
key, :mod:`lemoncore.cli.remote`). anyio, structlog and the settings are imported when a
command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from lemoncore.cli.common import (
    STARTED,
    add_server_arg,
    parse_options,
    print_result,
    settings_from,
)

if TYPE_CHECKING:
    from hypercorn.config import Config
    from starlette.applications import Starlette

    from lemoncore.cli.common import Subparsers
    from lemoncore.settings import Settings


def cmd_serve(args: argparse.Namespace) -> int:
    import structlog

    from lemoncore.app import create_app
    from lemoncore.logs import configure_logging

    if args.detach:
        from lemoncore.cli.daemon import detach

        return detach(args, [w for w in args.argv if w != "--detach"])
    eviction = {k: getattr(args, k) for k in EVICTION_FLAGS if getattr(args, k, None) is not None}
    args.eviction = eviction or None  # over the file's and the environment's, key by key
    settings = settings_from(args)
    configure_logging(settings.log_format, settings.log_level)
    if settings.host not in {"127.0.0.1", "localhost", "::1"} and settings.api_key is None:
        log = structlog.get_logger("lemoncore.cli")
        log.warning(
            "binding beyond loopback without an API key: anyone who can reach this "
            "address can use the server; set LEMON_API_KEY",
            host=settings.host,
        )
    return serve_app(create_app(settings), args.log_file)


def serve_app(app: Starlette, log_file: str | None = None) -> int:
    """Serve a :func:`~lemoncore.app.create_app` app with Hypercorn until a stop signal
    (:func:`lemoncore.platforms.stop_signals`) or ``POST /api/v1/shutdown``; the exit status (1: the
    port is taken, said on stderr with who holds it).

    The port is bound first, and only then is the server recorded as the one on its
    port (:func:`~lemoncore.cli.daemon.recorded`, ``log_file`` its output), so a second
    server on a taken port changes nothing. On either, the router refuses new requests
    and gives in-flight ones ``stop_grace`` seconds (streams then end with an error
    frame); Hypercorn's own grace is a second longer, so those answers still reach their
    clients. Then every backend is stopped.
    """
    import anyio
    import structlog
    from hypercorn.asyncio import serve

    from lemoncore.app import core_of
    from lemoncore.cli.daemon import port_taken, recorded
    from lemoncore.platforms import on_stop_signal

    log = structlog.get_logger("lemoncore.cli")

    core = core_of(app)
    settings = core.settings
    config = hypercorn_config(settings)
    try:
        (listening,) = config.create_sockets().insecure_sockets
    except OSError as exc:
        print(port_taken(settings, exc), file=sys.stderr)
        return 1
    config.bind = [f"fd://{listening.detach()}"]  # Hypercorn serves the bound socket

    async def main() -> None:
        with on_stop_signal(core.router.begin_shutdown):
            log.info(
                "serving",
                url=f"http://{settings.host}:{settings.port}/v1",
                startup_seconds=round(time.perf_counter() - STARTED, 3),
            )
            await serve(app, config, shutdown_trigger=core.router.shutdown_begun)  # type: ignore[arg-type]

    with recorded(settings, log_file):
        anyio.run(main)
    return 0


def hypercorn_config(settings: Settings) -> Config:
    """Hypercorn's configuration for ``settings``. Its limits on how a request arrives:
    ``keep_alive_timeout`` (``head_timeout``) closes a connection that has not sent a
    whole head that long after it opened or after its previous answer; h11 refuses (431)
    an incomplete head over ``h11_max_incomplete_size`` (``max_header_bytes``), which
    bounds a head's memory to that plus one 64 KiB read (HTTP/2: ``h2_max_header_list_size``,
    the same); no ``read_timeout``, which would
    cut a streamed answer whose client sends nothing. The app's
    :class:`~lemoncore.api.intake.Intake` enforces ``max_header_bytes`` exactly and
    ``body_timeout``."""
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = None
    config.graceful_timeout = settings.stop_grace + 1
    config.keep_alive_timeout = settings.head_timeout
    config.h11_max_incomplete_size = settings.max_header_bytes
    config.h2_max_header_list_size = settings.max_header_bytes  # h2's decoder refuses more
    return config


def cmd_explain(args: argparse.Namespace) -> int:
    """Ask a running server what loading a model would do, without doing it."""
    from lemoncore.cli.remote import Remote

    body = {"model_name": args.model, "dry_run": True, **parse_options(args.option)}
    plan = Remote.from_args(args).post("/api/v1/load", body, timeout=30)

    def text() -> None:
        print(
            f"{plan['model_name']}: {plan['recipe']}:{plan['backend']} "
            f"({plan['backend_state']}) on {plan['device']}"
            f"{' (AMD GPU)' if plan['is_amd_gpu'] else ''}, policy {plan['slot_policy']}"
        )
        print(f"  options: {json.dumps(plan['options'])}")
        if plan["already_loaded"]:
            print("  already loaded with these options: nothing to do")
        elif plan["refused"]:
            print(f"  refused: {plan['refused']}")
        for e in plan["evict"]:
            print(f"  evicts {e['model_name']} [{e['kind']}]: {e['reason']}")
        if not plan["evict"] and not plan["refused"] and not plan["already_loaded"]:
            print("  evicts nothing")

    print_result(plan, args.json, text)
    return 0


# auto-eviction flags (Lemonade's names), into the settings' `eviction` section
EVICTION_FLAGS = {
    "auto_evict": bool,
    "auto_evict_threshold_pct": float,
    "evict_idle_timeout": float,
    "downsize_idle_timeout": float,
    "evict_weight_factor": float,
}


def add_serve(sub: Subparsers) -> None:
    serve = sub.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--max-loaded-models", dest="max_loaded_models", type=int)
    serve.add_argument(
        "--extra-models-dir",
        dest="extra_models_dir",
        help="list the GGUF models of this folder (e.g. ~/.cache/llama.cpp) as extra. models",
    )
    serve.add_argument("--log-format", dest="log_format", choices=["console", "json"])
    serve.add_argument(
        "--log-level", dest="log_level", choices=["debug", "info", "warning", "error"]
    )
    serve.add_argument("--offline", action="store_true", default=None)
    serve.add_argument(
        "--auto-evict",
        dest="auto_evict",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="evict idle models past evict_idle_timeout and the most disposable under "
        "memory pressure",
    )
    for name, kind in EVICTION_FLAGS.items():
        if name == "auto_evict":
            continue
        serve.add_argument("--" + name.replace("_", "-"), dest=name, type=kind)
    serve.add_argument(
        "--detach",
        action="store_true",
        help="run in the background (log in <cache_dir>/run/); stop it with 'lemon stop'",
    )
    serve.add_argument("--log-file", dest="log_file", help=argparse.SUPPRESS)
    serve.set_defaults(func=cmd_serve)


def add_explain(sub: Subparsers) -> None:
    explain = sub.add_parser(
        "explain",
        help="what loading MODEL would evict, and why (asks "
        "the running server: the plan depends on what it has loaded)",
    )
    explain.add_argument("model")
    explain.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        help="a load option, e.g. -o backend=cpu -o ctx_size=8192",
    )
    add_server_arg(explain)
    explain.set_defaults(func=cmd_explain)
