"""llama.cpp's server from the xllamacpp wheel, run as llama-server would be.

``python -m lemon_plugin_llamacpp.xserver <llama-server arguments>``, ``LLAMA_API_KEY`` in
the environment: parses the arguments with :mod:`lemon_plugin_llamacpp.xparams`, starts
``xllamacpp.Server`` (which returns once the model is loaded and the HTTP server answers),
serves until SIGTERM or SIGINT, then exits 0 at once.

Exit status: 2 and one line on stderr for arguments llama-server refuses or this backend
cannot apply; 1 when the server does not start (a model that does not load, a port in use:
llama.cpp's own error lines come first); killed by the signal if SIGTERM arrives while the
model loads (llama-server too installs its handlers only once the model is loaded).

llama.cpp logs through its own logger (``common/log.cpp``), to stderr, one flushed line per
message; ``-lv N`` sets its verbosity. xllamacpp's ``init()`` (``src/xllamacpp/server.cpp``)
installs no signal handlers ("Do not install process-wide signal handlers in this Python
extension module"), so the ones here decide.
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from lemon_plugin_llamacpp.xparams import ArgumentError, EnumValue, Setting, parse

EXIT_USAGE = 2  # llama-server itself returns 1 for a bad argument (tools/server/server.cpp)
EXIT_FAILED = 1
# SIGBREAK: what lemoncore's CTRL_BREAK_EVENT stop is on Windows (lemoncore.platforms)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, *(
    [signal.SIGBREAK] if hasattr(signal, "SIGBREAK") else []))  # fmt: skip


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def apply(params: object, settings: Sequence[Setting], enum: Callable[[EnumValue], object]
          ) -> None:  # fmt: skip
    """Write ``settings`` onto ``params`` (an ``xllamacpp.CommonParams``, or anything with
    the same attributes), in order, with ``enum`` turning an :class:`EnumValue` into the
    member to store. Nested paths (``sampling.top_k``) go through the owner's attribute:
    xllamacpp's sub-objects are views onto the one ``common_params`` (``from_ptr``)."""
    for setting in settings:
        *owners, name = setting.path.split(".")
        target = params
        for owner in owners:
            target = getattr(target, owner)
        value: Any = setting.value
        if isinstance(value, EnumValue):
            value = enum(value)
        current: Any = None if setting.op == "set" else getattr(target, name)
        match setting.op:
            case "set":
                new = list(value) if isinstance(value, tuple) else value
            case "or":
                new = int(current) | int(value)
            case "max":
                new = max(int(current), int(value))
            case "extend":
                new = {*current, *value} if isinstance(current, set) else [*current, *value]
            case "join":
                new = f"{current},{value}" if current else value
            case "update":
                new = {**current, value[0]: value[1]}
            case "splice":
                new = [*value, *list(current)[len(value) :]]
        setattr(target, name, new)


def _trap_stop_signals() -> Callable[[], int]:
    """Catch SIGTERM and SIGINT from now on; the function returned blocks until one comes
    and returns its number. Python runs handlers in the main thread only, but the signal
    may land on one of llama.cpp's threads: what wakes the main thread is the wakeup socket,
    which the C-level handler writes to from whichever thread it runs in."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno())
    got: list[int] = []
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda n, _frame: got.append(n))

    def wait() -> int:  # holds the sockets: a collected one would close the wakeup fd
        while not got:
            reader.recv(64)  # then the handler has run, or runs before the next bytecode
        signal.set_wakeup_fd(-1)
        writer.close()
        return got[0]

    return wait


def _default_signals() -> None:
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def _version() -> int:
    """What ``llama-server --version`` prints (common/common.cpp ``common_init``'s two
    lines), from the wheel: its build number is the last part of xllamacpp's version
    (``BUILD_INFO`` says 0: the wheel is built outside llama.cpp's git tree)."""
    xllamacpp: Any = importlib.import_module("xllamacpp")
    info, version = xllamacpp.BUILD_INFO, xllamacpp.__version__
    print(f"version: {version.rsplit('.', 1)[-1]} (xllamacpp {version})")
    print(f"built with {info['compiler']} for {info['build_target']}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server for ``argv`` (default ``sys.argv[1:]``): the exit status if it does
    not start; once serving, a stop signal ends the process (status 0)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        return _version()
    try:
        settings = parse(args, env=os.environ)
    except ArgumentError as exc:
        _say(str(exc))
        return EXIT_USAGE
    model = next((s.value for s in settings if s.path == "model.path"), "")
    if not model:  # xllamacpp has no router mode (src/xllamacpp/server.cpp Server::Server)
        _say("error: -m/--model is required: xllamacpp serves one model, it has no router mode")
        return EXIT_USAGE
    try:
        xllamacpp: Any = importlib.import_module("xllamacpp")
    except ImportError as exc:
        _say(f"error: xllamacpp is not importable ({exc}); reinstall llamacpp:prebuilt")
        return EXIT_FAILED
    params = xllamacpp.CommonParams()
    try:
        apply(params, settings, lambda e: getattr(xllamacpp, e.enum)[e.name])
    except (OverflowError, TypeError, ValueError, KeyError, AttributeError) as exc:
        _say(f"error: xllamacpp refused the arguments: {type(exc).__name__}: {exc}")
        return EXIT_USAGE
    # While the model loads, Server() holds the GIL: no Python handler could run, so a stop
    # signal keeps its default action and ends the process at once, as in llama-server.
    _default_signals()
    try:
        server = xllamacpp.Server(params)
    except (RuntimeError, ValueError) as exc:  # std::runtime_error / invalid_argument
        _say(f"error: llama.cpp's server did not start ({exc}) for model '{model}'; "
             "its own error lines above say why")  # fmt: skip
        return EXIT_FAILED
    wait = _trap_stop_signals()  # at once: /health may already have answered 200
    _say(f"xserver: serving on {server.listening_address}")  # (and keeps the Server alive)
    signum = wait()
    _say(f"xserver: {signal.Signals(signum).name} received, exiting")
    # Not ~Server: llama.cpp's teardown, which llama-server runs on SIGTERM too, waits about
    # 30 s for a response still streaming (measured with both). It saves nothing, and open
    # streams end either way, so leave at once.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
