"""The container engines: recipes, the backend added to llama.cpp, and their options.

Each backend's launch contract is in :mod:`lemon_plugin_oci.contracts`; its settable
environment variables become typed administrator options of the backend.
"""

from __future__ import annotations

from lemoncore.plugin import (
    OPENAI_ENDPOINTS,
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

from lemon_plugin_oci.contracts import CONTRACTS, LaunchContract, ctx_size

STRIX_HALO = SupportRow(
    os=frozenset({"linux"}), devices={DeviceKind.AMD_GPU: frozenset({"gfx1151"})}
)


TRUSTED_NAMESPACES_OPTION = OptionSpec(
    name="trusted_namespaces",
    type="list",
    scope=OptionScope.ADMIN,
    help="Image namespaces (registry/owner) trusted beside the built-in ones.",
)


MEMORY_CHECK_OPTION = OptionSpec(
    name="memory_check_gib",
    type="float",
    minimum=0,
    scope=OptionScope.ADMIN,
    help="GiB of memory checked before a start instead of the engine's estimate (0: none).",
)


def start_timeout_option(contract: LaunchContract) -> OptionSpec:
    """The backend's start budget: the contract's floor as the default. lemoncore reads
    this option by name (``lemoncore.serving.launcher.START_TIMEOUT``); set, it replaces
    the global ``load_timeout`` for this backend."""
    return OptionSpec(
        name="start_timeout",
        type="float",
        default=contract.start_timeout,
        minimum=1,
        scope=OptionScope.ADMIN,
        help="Seconds this backend's start may take (default: the larger of load_timeout "
        "and the engine's own floor, if it has one).",
    )


def container_backend(
    name: str,
    description: str,
    contract: LaunchContract,
    support: tuple[SupportRow, ...] = (STRIX_HALO,),
    endpoints: frozenset[str] = OPENAI_ENDPOINTS,
) -> Backend:
    return Backend(
        name=name,
        tier=Tier.EXPERIMENTAL,
        format=Format.CONTAINER,
        description=description,
        support=support,
        endpoints=endpoints,
        options=(
            TRUSTED_NAMESPACES_OPTION,
            MEMORY_CHECK_OPTION,
            start_timeout_option(contract),
            *(s.option for s in contract.settings),
        ),
    )


RECIPES = [
    Recipe(
        name="ds4",
        display_name="DwarfStar4 (container, experimental)",
        default_device=Device.GPU,
        options=(ctx_size(32768),),
        backends=(
            container_backend("rocm", "kyuz0's DwarfStar4 toolbox image", CONTRACTS["ds4", "rocm"]),
        ),
    ),
    Recipe(
        name="rocmfpx",
        display_name="ROCmFPX (container, experimental)",
        default_device=Device.GPU,
        options=(ctx_size(8192),),
        backends=(
            container_backend(
                "rocm", "kyuz0's ROCmFPX toolbox image", CONTRACTS["rocmfpx", "rocm"]
            ),
        ),
    ),
    Recipe(
        name="halogen",
        display_name="Halogen flash server (container, experimental)",
        default_device=Device.GPU,
        options=(ctx_size(262144),),
        backends=(
            container_backend(
                "rocm",
                "ghcr.io/peonist-ai/halogen-flash-server; needs ~68 GiB pinned RAM plus ~35 GiB KV",
                CONTRACTS["halogen", "rocm"],
            ),
        ),
    ),
]
# The image's llama-server: tokenize/detokenize are as old as llama-server itself; its
# build is not pinned to one with /v1/messages and /v1/responses, so lemoncore translates
# those to chat, which every build serves (rerank needs --reranking, which it never gets).
CONTRIBUTIONS = [
    BackendContribution(
        recipe="llamacpp",
        backend=container_backend(
            "nathanw",
            "kyuz0's llama.cpp Vulkan (RADV) toolbox image, NathanW's build",
            CONTRACTS["llamacpp", "nathanw"],
            endpoints=OPENAI_ENDPOINTS | {"/tokenize", "/detokenize"},
        ),
    )
]
