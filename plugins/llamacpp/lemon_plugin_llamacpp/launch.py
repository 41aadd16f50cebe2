"""The llama-server command line for a model.

``llamacpp_args`` reaches this point already checked by lemoncore against the recipe's
allow-list (``flags.TUNING_FLAGS`` plus what an administrator allowed); flags lemoncore
sets itself are refused here too, so no widening can break routing.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from lemoncore.launch import LaunchContext, LaunchRefused, LaunchSpec
from lemoncore.recipes import ModelInfo, ModelType

from lemon_plugin_llamacpp.install import find_executable

# Flags lemoncore sets or that would break routing; users cannot override them.
RESERVED_FLAGS = frozenset({
    "-m", "--model", "--port", "--host", "-c", "--ctx-size", "-a", "--alias", "--metrics",
    "--embedding", "--embeddings", "--reranking", "--rerank", "--jinja", "--no-jinja", "-hf",
    "-hfr", "--hf-repo",
    "-mu", "--model-url", "--api-key", "--api-key-file", "--path", "--models-dir",
    "--models-preset", "--models-max", "--ssl-key-file", "--ssl-cert-file",
})


def user_args(text: str) -> list[str]:
    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise LaunchRefused(f"llamacpp_args cannot be parsed: {exc}") from exc
    reserved = sorted({a.split("=", 1)[0] for a in args} & RESERVED_FLAGS)
    if reserved:
        raise LaunchRefused(f"llamacpp_args may not contain {', '.join(reserved)}: lemoncore "
                            "sets these itself (use the ctx_size option for --ctx-size); "
                            "remove them from recipes.llamacpp.llamacpp_args_allow")
    return args


def build_launch(model: ModelInfo, context: LaunchContext) -> LaunchSpec:
    configured = context.config.get("system_bin")  # the system backend's own binary name
    exe = Path(str(configured)) if configured and \
        Path(str(configured)).parent == context.install_dir else \
        find_executable(context.install_dir)
    if exe is None:
        raise LaunchRefused(f"llama-server not found in {context.install_dir}; reinstall the "
                            "backend with 'lemon backends install llamacpp:<backend>'")
    opts = context.options
    argv = [str(exe), "-m", str(context.model_path), "--port", str(context.port),
            "--host", context.host, "--ctx-size", str(opts["ctx_size"]), "--jinja",
            "--metrics", "--alias", model.name]
    if model.model_type is ModelType.EMBEDDING:
        argv.append("--embeddings")
    elif model.model_type is ModelType.RERANKING:
        argv.append("--reranking")
    argv += user_args(str(opts.get("llamacpp_args") or ""))
    # The binary's own directory first, then the runtime lemoncore decided (ROCm), if any.
    lib_var = "PATH" if sys.platform == "win32" else "LD_LIBRARY_PATH"
    inherited = context.runtime_env.get(lib_var, os.environ.get(lib_var, ""))
    search = os.pathsep.join(p for p in (str(exe.parent), inherited) if p)
    # Only lemoncore, which sends the launch's key, may use the engine's port; /health
    # stays open for the readiness probe. The environment, not argv: /health shows argv.
    return LaunchSpec(argv=tuple(argv), env={**context.runtime_env, lib_var: search,
                                              "LLAMA_API_KEY": context.backend_key})
