"""The ``vte`` recipe and the models VTE is validated with."""

from __future__ import annotations

from lemoncore.plugin import (
    Backend,
    Device,
    DeviceKind,
    ModelInfo,
    OptionScope,
    OptionSpec,
    Recipe,
    SlotPolicy,
    SupportRow,
    Tier,
)

from lemon_plugin_vte.vte_source import SUPPORTED_ARCHS, VTE_VERSION

RECIPE = Recipe(
    name="vte",
    display_name="VTE (native AMD RDNA3, experimental)",
    default_device=Device.GPU,
    slot_policy=SlotPolicy.EXCLUSIVE_GPU,
    options=(
        # One recipe-level default instead of a pin on every model: auto-sizing from GGUF
        # metadata would pick 131072+ tokens, and VTE sizes its split-KV grid from it.
        OptionSpec(
            name="ctx_size",
            default=8192,
            minimum=1,
            maximum=2**24,
            help="--context-length passed to vte-server",
        ),
        OptionSpec(
            name="device_index",
            type="int",
            minimum=0,
            scope=OptionScope.ADMIN,
            help="HIP device index VTE must use (VTE_DEVICE_INDEX); unset, VTE "
            "takes the first GPU of its table in the gfx110X family",
        ),
    ),
    backends=(
        Backend(
            name="rocm",
            tier=Tier.EXPERIMENTAL,
            max_concurrency=1,
            description=f"vte-server {VTE_VERSION} on Windows. Validated on one RX 7600 "
            "(gfx1102); the RX 7600 XT, 7600S and 7600M XT load the same kernels but have "
            "never run them; the RX 7700, 7800 XT and 7900 series kernels (gfx1101, "
            "gfx1100) are cross-compiled and have never run.",
            support=(
                SupportRow(
                    os=frozenset({"windows"}), devices={DeviceKind.AMD_GPU: SUPPORTED_ARCHS}
                ),
            ),
        ),
    ),
)

MODELS = [
    ModelInfo(
        name=name,
        recipe="vte",
        checkpoint=checkpoint,
        labels=("chat",),
        suggested=True,
        description=f"{size} GB",
    )
    for name, checkpoint, size in [
        (
            "Qwen2.5-1.5B-Instruct-VTE",
            "Qwen/Qwen2.5-1.5B-Instruct-GGUF:qwen2.5-1.5b-instruct-q4_k_m.gguf",
            1.12,
        ),
        ("Granite-4.1-3B-VTE", "unsloth/granite-4.1-3b-GGUF:granite-4.1-3b-Q8_0.gguf", 3.62),
        ("Qwen3.5-2B-VTE", "unsloth/Qwen3.5-2B-GGUF:Qwen3.5-2B-Q6_K.gguf", 1.57),
        (
            "Llama-3.1-8B-Instruct-VTE",
            "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF:Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            4.58,
        ),
    ]
]
