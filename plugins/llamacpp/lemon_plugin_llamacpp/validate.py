"""Field checks for ``lemon validate llamacpp:*``: what llama-server itself reports on the
user's machine. Registered by the plugin's ``register_field_checks`` hook."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

from lemoncore.plugin import FieldCheck, FieldContext, FieldResult

from lemon_plugin_llamacpp.launch import XSERVER

if TYPE_CHECKING:
    import httpx


def engine_client(backend_url: str) -> httpx.Client:
    """A client for the engine itself: ``unix:/path.sock`` or ``http://host:port``."""
    import httpx  # when a check runs, not when the plugin loads

    if backend_url.startswith("unix:"):
        return httpx.Client(
            base_url="http://engine", timeout=30, transport=httpx.HTTPTransport(uds=backend_url[5:])
        )
    return httpx.Client(base_url=backend_url, timeout=30)


def served_name(context: FieldContext) -> FieldResult:
    """llama-server was launched with the served name (``--alias``; what its answers name)
    and itself answers ``/health`` (the one route it serves without the launch's key)."""
    argv = [str(a) for a in context.loaded["launch_command"]]
    alias = argv[argv.index("--alias") + 1] if "--alias" in argv else None
    assert alias == context.model, (
        f"llama-server was given --alias {alias!r}, not the served name {context.model!r}"
    )
    with engine_client(str(context.loaded["backend_url"])) as engine:
        answer = engine.get("/health")
    assert answer.status_code == 200, (
        f"llama-server's /health: {answer.status_code} {answer.text[:300]}"
    )
    return FieldResult({"alias": alias, "engine": str(context.loaded["backend_url"])})


def build_info(context: FieldContext) -> FieldResult:
    """The executable that ran reports its build (``llama-server --version``; the prebuilt
    backend's ``python -m lemon_plugin_llamacpp.xserver --version``)."""
    argv = [str(a) for a in context.loaded["launch_command"]]
    program = argv[:4] if tuple(argv[1:4]) == XSERVER else argv[:1]
    exe = " ".join(program)
    done = subprocess.run(
        [*program, "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    text = (done.stdout + done.stderr).strip()
    lines = [
        line.strip() for line in text.splitlines() if line.startswith(("version:", "built with"))
    ]
    assert done.returncode == 0 and lines, (
        f"{exe} --version exited {done.returncode}: {text[-500:]}"
    )
    return FieldResult({"build": " ".join(lines)})


FIELD_CHECKS = [
    FieldCheck("served-name", "llama-server lists the model under the served name", served_name),
    FieldCheck(
        "build-info", "the llama-server that ran reports its version and compiler", build_info
    ),
]
