"""The container engines: recipes, the backend added to llama.cpp, and each policy.

A policy is the ceiling an image runs under (reviewed code); its labels may only narrow
it. ``command`` is the engine's argv inside the container.
"""

from __future__ import annotations

from lemoncore.recipes import (
    Backend,
    BackendContribution,
    Device,
    DeviceKind,
    Format,
    OptionScope,
    OptionSpec,
    Recipe,
    SupportRow,
    Tier,
)

from lemon_plugin_oci.engine import SOCKET
from lemon_plugin_oci.policy import ContainerPolicy

STRIX_HALO = SupportRow(os=frozenset({"linux"}),
                        devices={DeviceKind.AMD_GPU: frozenset({"gfx1151"})})


TRUSTED_NAMESPACES_OPTION = OptionSpec(
    name="trusted_namespaces", type="list", scope=OptionScope.ADMIN,
    help="Image namespaces (registry/owner) trusted beside the built-in ones.")


def container_backend(name: str, description: str) -> Backend:
    return Backend(name=name, tier=Tier.EXPERIMENTAL, format=Format.CONTAINER,
                   description=description, support=(STRIX_HALO,),
                   options=(TRUSTED_NAMESPACES_OPTION,))


def ctx_size(default: int) -> OptionSpec:
    return OptionSpec(name="ctx_size", default=default, minimum=1, maximum=2**24,
                      help="Context size in tokens")


LLAMA_SERVER = ("llama-server", "-m", "{model}", "--host", SOCKET, "--ctx-size", "{ctx_size}",
                "--jinja", "-fa", "on")
GPU = frozenset({"/dev/dri", "/dev/kfd"})

RECIPES = [
    Recipe(name="ds4", display_name="DwarfStar4 (container, experimental)",
           default_device=Device.GPU, options=(ctx_size(8192),),
           backends=(container_backend("rocm", "kyuz0's DwarfStar4 toolbox image"),)),
    Recipe(name="rocmfpx", display_name="ROCmFPX (container, experimental)",
           default_device=Device.GPU, options=(ctx_size(8192),),
           backends=(container_backend("rocm", "kyuz0's ROCmFPX toolbox image"),)),
    Recipe(name="halogen", display_name="Halogen flash server (container, experimental)",
           default_device=Device.GPU, options=(ctx_size(262144),),
           backends=(container_backend("rocm", "ghcr.io/peonist-ai/halogen-flash-server; "
                                               "needs ~68 GB pinned RAM plus ~35 GB KV"),)),
]
CONTRIBUTIONS = [BackendContribution(recipe="llamacpp", backend=container_backend(
    "nathanw", "kyuz0's llama.cpp Vulkan (RADV) toolbox image, NathanW's build"))]

POLICIES: dict[tuple[str, str], ContainerPolicy] = {
    ("llamacpp", "nathanw"): ContainerPolicy(command=LLAMA_SERVER,
                                             devices=frozenset({"/dev/dri"})),
    ("rocmfpx", "rocm"): ContainerPolicy(command=LLAMA_SERVER, devices=GPU),
    ("ds4", "rocm"): ContainerPolicy(command=LLAMA_SERVER, devices=GPU,
                                     health_path="/v1/models"),
    ("halogen", "rocm"): ContainerPolicy(
        command=("halogen-flash-server",), devices=GPU, ipc_host=True, min_memory_gb=108,
        health_path="/v1/models",
        env={"HALOGEN_CTX": "{ctx_size}", "HALOGEN_KV_POOL_POSITIONS": "524288",
             "HALOGEN_KV_SLOTS": "4", "HALOGEN_PROMPT_CACHE": "2",
             "HALOGEN_CHECKPOINT": "{model}"}),
}
