"""Each engine's launch contract: what its image needs to start, read from its own sources.

A contract is reviewed code and the ceiling an image runs under; the image's
``org.lemonade.*`` labels may only narrow it (:mod:`lemon_plugin_oci.policy`). Every field
of the four engines' contracts carries its provenance in ``sources``; the keys name the
repositories and commits listed in the project's reference notes (``engine-contracts.md``):
TB kyuz0/amd-strix-halo-toolboxes, DT kyuz0/strix-halo-ds4-toolbox, CP
kyuz0/ai-toolbox-cockpit, AZ antirez/ds4, RF charlie12345/ROCmFPX, HG
peonist-ai/halogen-flash-server, LT/LX lemonade-sdk/lemonade (spec, descriptors); and two
the notes do not key: KD kyuz0/ds4 (the source DT's rocm-7.14 image builds) and NW
Nathanw1014/llama.cpp (the source TB's vulkan-radv-performance image builds).

Command templates take ``{model}`` (the model's path inside the container), ``{served}``
(the name lemoncore serves it as: answers must carry it), ``{socket}``, ``{port}`` and any
option name (``{ctx_size}``). A tuple inside ``command`` is a group of
arguments dropped when one of its values is empty.
"""

from __future__ import annotations

from lemoncore.plugin import OptionScope, OptionSpec

from lemon_plugin_oci.contract_types import (
    MODELS_DIR,
    ROCM,
    SOCKET,
    SOCKET_DIR,
    VULKAN,
    Argument,
    EnvSetting,
    LaunchContract,
    ModelFile,
    admin_int,
    ctx_size,
)

# the contract types, re-exported: contracts are what plugins and tests import
__all__ = [
    "MODELS_DIR",
    "ROCM",
    "SOCKET",
    "SOCKET_DIR",
    "VULKAN",
    "Argument",
    "EnvSetting",
    "LaunchContract",
    "ModelFile",
    "admin_int",
    "ctx_size",
]

LLAMA_SOURCES = {
    "transport": "llama-server --host ending in .sock listens on AF_UNIX: RF "
    "tools/server/server-http.cpp L349-355 (upstream llama.cpp PR #12613)",
    "health_path": "GET /health: 503 while loading, 200 when ready (RF server-http.cpp)",
}

NATHANW = LaunchContract(
    command=(
        "llama-server",
        "-m",
        "{model}",
        "--alias",
        "{served}",
        "--host",
        "{socket}",
        "--ctx-size",
        "{ctx_size}",
        "--jinja",
        "-ngl",
        "999",
        "-fa",
        "on",
        "--load-mode",
        "none",
    ),
    devices=VULKAN,
    sources={
        **LLAMA_SOURCES,
        "image": "TB Dockerfile.vulkan-radv-performance @d1a34be: git clone -b "
        "strix-halo-vulkan https://github.com/Nathanw1014/llama.cpp.git (unpinned: no "
        "commit is recorded for the pinned digest; TB's 2026-08-04 benchmark manifests "
        "record builds 10249 (aaf4fba83) and 10283 (b7b85da9c) of this tag), installs "
        "llama-server in /usr/bin (no ENTRYPOINT, CMD /bin/bash)",
        "command": "the fork's own parser, NW common/arg.cpp @cc961f7 and @0f1424d "
        "(common_params_parser_init): -m/--model, -a/--alias (comma-separated), --host, "
        "-c/--ctx-size, --jinja, -ngl N|auto|all, -fa on|off|auto, -lm/--load-mode "
        "auto|none|mmap|mlock|mmap+mlock|dio (else 'invalid value'); --mmap/--no-mmap "
        "are still accepted there but 'DEPRECATED in favor of --load-mode', so "
        "--load-mode none; an unknown flag is 'error: invalid argument: X' "
        "(common_params_parse_ex) and llama-server exits 1. Values: TB README 'Always "
        "use -fa 1 and --no-mmap on Strix Halo'; -ngl 999 as CP server_runner.py",
        "transport+": "NW common/arg.cpp --host: 'bind to an UNIX socket if the address "
        "ends with .sock' (the fork's server-http.cpp is not in the index)",
        "devices": "LT: devices ['/dev/dri'] only (Vulkan/RADV needs no /dev/kfd)",
        "ipc_host": "LT/CP: not set",
        "memlock_unlimited": "LT/CP: not set (only with /dev/infiniband in CP)",
        "env": "none required (TB README)",
        "files": "one GGUF (LG; CP first shard)",
    },
)

ROCMFPX = LaunchContract(
    command=(
        "llama-server",
        "-m",
        "{model}",
        "--alias",
        "{served}",
        "--host",
        "{socket}",
        "--ctx-size",
        "{ctx_size}",
        "--jinja",
        "-ngl",
        "999",
        "-fa",
        "on",
        "--no-mmap",
        "-b",
        "2048",
        "-ub",
        "2048",
    ),
    devices=ROCM,
    env={"HSA_OVERRIDE_GFX_VERSION": "11.5.1", "GGML_HIP_ENABLE_UNIFIED_MEMORY": "1"},
    sources={
        **LLAMA_SOURCES,
        "command": "TB Dockerfile.rocm-7.14-rocmfpx installs llama-server in /usr/local/bin; "
        "LX rocmfpx.h defaults: batch 2048, ubatch 2048, flash attention on, "
        "no-mmap ('FP4/FP6/FP8 weights are decoded on the fly and must stay "
        "resident'), --jinja; CP toolboxes.json: supports_load_mode false, so "
        "--no-mmap (the fork predates --load-mode)",
        "devices": "LX rocmfpx.h: /dev/dri + /dev/kfd, no cap_add; CP amd-rocm profile",
        "ipc_host": "LX/CP: not set",
        "memlock_unlimited": "LX/CP: not set",
        "env": "RF README 'common runtime environment' for Strix Halo (CP omits them for "
        "this tag, by a name match on 'rocmfp4': a Cockpit bug, not a choice)",
        "files": "one ROCmFPX-quantized GGUF (LG)",
    },
)

DS4 = LaunchContract(
    command=(
        "ds4-server",
        "-m",
        "{model}",
        "--ctx",
        "{ctx_size}",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--ssd-streaming",
        "--prefill-chunk",
        "2048",
        ("--ssd-streaming-cache-experts", "{expert_cache}"),
    ),
    transport="tcp:8000",
    health_path="/v1/models",
    devices=ROCM,
    ipc_host=True,
    cap_add=frozenset({"SYS_PTRACE"}),
    settings=(
        EnvSetting(
            "DS4_ROCM_ENABLE_MXFP4_TILE4",
            OptionSpec(
                name="mxfp4_tile4",
                type="bool",
                default=True,
                scope=OptionScope.ADMIN,
                help="DS4_ROCM_ENABLE_MXFP4_TILE4 (Cockpit's default: on)",
            ),
        ),
        EnvSetting(
            "DS4_ROCM_MXFP4_DOWN_RGROUP",
            admin_int("mxfp4_down_rgroup", 4, 1, 64, "DS4_ROCM_MXFP4_DOWN_RGROUP (Cockpit's: 4)"),
        ),
    ),
    min_device_gib=16,
    memory_hint="ds4 streams experts from disk; the expert cache is half the GPU's "
    "memory pool (--ssd-streaming-cache-experts)",
    sources={
        "image": "DT Dockerfile.rocm-7.14 @07c355e: git clone -b main "
        "https://github.com/kyuz0/ds4.git, make strix-halo ROCM_ARCH=gfx1151 (a "
        "-DDS4_ROCM_BUILD build), ds4-server in /usr/local/bin; the clone is unpinned, "
        "so the pinned digest's commit is not recorded. Not AZ @8d57664, whose "
        "parse_options refuses --ssd-streaming, --prefill-chunk, "
        "--ssd-streaming-cache-experts and --rocm as unknown options",
        "command": "KD ds4_server.c @67f2ca9 (same at @8bbb05f) parse_options: -m, "
        "-c/--ctx, --host (default 127.0.0.1), --port (default 8000), --ssd-streaming, "
        "--prefill-chunk N (> 0), --ssd-streaming-cache-experts <N|NGB> "
        "(ds4_parse_streaming_cache_experts_arg, AZ ds4_ssd.c @0f776d8); an unknown "
        "option, a missing or bad value exit 2. Values: LM ds4-backend ds4_server.cpp: "
        "--ssd-streaming is mandatory on gfx1151 (full residency of the 81 GB model runs "
        "out of memory); LG: --prefill-chunk 2048 (an unchunked long prefill faults the "
        "GPU) and an expert cache of half the device pool (ds4's own choice of the whole "
        "arena died on a 2.6k-token prompt)",
        "transport": "KD ds4_server.c @67f2ca9 listen_on: socket(AF_INET), "
        "inet_pton(AF_INET), no unix socket option (as AZ @8d57664); a bad --host fails "
        "only after the model loaded ('failed to listen on H:P: Invalid argument', exit 1)",
        "health_path": "AZ route table has no /health; the port is bound after the model "
        "loads, so the first /v1/models reply means ready (LM ds4_server.cpp)",
        "devices": "LX ds4.h: /dev/dri + /dev/kfd",
        "ipc_host": "LX ds4.h ipc_host: true; CP "
        "adds --ipc=host 'to prevent HSA memory-mapping errors'",
        "cap_add": "LX ds4.h cap_add: SYS_PTRACE; CP adds --cap-add=SYS_PTRACE",
        "memlock_unlimited": "LX ds4.h memlock_unlimited: false",
        "settings": "CP's default toggles DS4_ROCM_ENABLE_MXFP4_TILE4=1, "
        "DS4_ROCM_MXFP4_DOWN_RGROUP=4; no variable is known to be required",
        "files": "one single-file ds4 GGUF (antirez/deepseek-v4-gguf)",
        "min_device_gib": "LX gen_toolbox_catalog.py: min_resident_gb 16 for DS4 models",
        "relay": "DT Dockerfile.rocm-7.14/-10.0 install python3-pip (huggingface_hub)",
    },
)

HALOGEN = LaunchContract(
    command=("all",),  # the image's entrypoint's mode
    transport="tcp:8731",
    health_path="/health",
    devices=ROCM,
    ipc_host=True,
    memlock_unlimited=True,
    env={"HALOGEN_API_PORT": "{port}", "HALOGEN_CTX": "{ctx_size}"},
    settings=(
        EnvSetting(
            "HALOGEN_KV_POOL_POSITIONS",
            admin_int(
                "kv_pool_positions",
                524288,
                4096,
                1048576,
                "HALOGEN_KV_POOL_POSITIONS: KV pool size; 262144 cuts GPU memory by ~7 GiB",
            ),
        ),
        EnvSetting("HALOGEN_KV_SLOTS", admin_int("kv_slots", 4, 1, 64, "HALOGEN_KV_SLOTS")),
        EnvSetting(
            "HALOGEN_PROMPT_CACHE", admin_int("prompt_cache", 2, 0, 64, "HALOGEN_PROMPT_CACHE")
        ),
        EnvSetting(
            "HALOGEN_MAX_TOK",
            admin_int(
                "max_tok", None, 1, 1048576, "HALOGEN_MAX_TOK (never raise it to the context size)"
            ),
        ),
        EnvSetting(
            "HALOGEN_HOST_RESERVE_GIB",
            admin_int("host_reserve_gib", None, 0, 512, "HALOGEN_HOST_RESERVE_GIB"),
        ),
        EnvSetting(
            "HALOGEN_ROPE_YARN",
            admin_int(
                "rope_yarn",
                None,
                2,
                4,
                "HALOGEN_ROPE_YARN: static YaRN factor for a ctx_size past 262144 "
                "(2: 524288, 4: 1048576); rescales every position",
            ),
        ),
        EnvSetting(
            "HALOGEN_WEIGHTS_LOCK",
            OptionSpec(
                name="weights_lock",
                type="bool",
                scope=OptionScope.ADMIN,
                help="HALOGEN_WEIGHTS_LOCK: lock weights in RAM (needs an unlimited hard "
                "memlock limit on the host)",
            ),
        ),
    ),
    files=(
        ModelFile("{file}", env="HALOGEN_CHECKPOINT"),
        ModelFile("{stem}.overlay.hgn", env="HALOGEN_CK_OVERLAY"),
        ModelFile("tokenizer", env="HALOGEN_TOKENIZER", directory=True),
    ),
    min_host_gib=68,
    min_device_gib=35,
    memory_hint="set recipes.halogen.kv_pool_positions = 262144 (HALOGEN_KV_POOL_POSITIONS) "
    "to need ~7 GiB less",
    pins_page_cache=True,
    start_timeout=3600,
    min_kernel=(7, 0),
    native_ctx=262144,
    rope_env="HALOGEN_ROPE_YARN",
    sources={
        "command": "HG deploy/entrypoint.sh: the image's entrypoint takes a mode, 'all' "
        "by default (flash_serve on 127.0.0.1:8730, then serve_api.py); named "
        "here so no CMD of the image can pick another; LX test: no other "
        "arguments",
        "transport": "HG entrypoint.sh: serve_api.py --host 0.0.0.0 --port $HALOGEN_API_PORT "
        "(default 8731), no socket option; the engine port 8730 has no "
        "authentication and is never reachable from outside the container",
        "health_path": "HG and LX halogen_server.cpp: GET /health (the API exists only after "
        "the engine loaded); LT Appendix A says /v1/models: contradicted",
        "devices": "HG run line: --device /dev/kfd --device /dev/dri",
        "ipc_host": "HG run line --ipc=host; CP halogen profile; seed 002: ROCm's HSA "
        "runtime dies in about 2 s without it",
        "memlock_unlimited": "HG run line --ulimit memlock=-1:-1; HG README: rootless "
        "podman clamps it to the hard limit and Halogen warns and "
        "runs unlocked",
        "env": "LX halogen: HALOGEN_API_PORT, HALOGEN_CTX = ctx_size or 262144",
        "settings": "HG docs/FLAGS.md (each read once at startup); LX defaults "
        "KV_POOL_POSITIONS=524288, KV_SLOTS=4, PROMPT_CACHE=2",
        "files": "HG FLAGS.md: HALOGEN_CHECKPOINT, HALOGEN_CK_OVERLAY (<stem>.overlay.hgn), "
        "HALOGEN_TOKENIZER (a flat directory: HF-cache symlinks dangle inside the "
        "container); LT/LX mount each file separately",
        "min_host_gib": "HG: defaults hold ~68 GiB of pinned weights in RAM",
        "min_device_gib": "HG: ~35 GiB on the device at the default KV pool",
        "relay": "HG entrypoint.sh runs serve_api.py with python3; CP "
        "runtime/isolated_api.py relays with the image's python3 -I -u -c",
        "pins_page_cache": "HG README 'Give it a machine of its own': free and MemAvailable "
        "count the locked weights as reclaimable page cache and overstate free memory by "
        "about 68 GiB (Mlocked, Unevictable stay 0)",
        "start_timeout": "LX halogen_server.cpp: startup timeout max(1800 s, global); HG "
        "docker-compose.yml start_period 20m; HG entrypoint.sh @04f446b: a fixed 1800 s "
        "wait killed hosts that load for longer, so it now waits unbounded",
        "min_kernel": "on 6.18.6 its read-only GPU mapping of the checkpoint fails with "
        "'invalid argument' (HG README, 0.13.8 era; LT: Linux >= 7.0)",
        "native_ctx": "HG entrypoint.sh @04f446b exits 2 past 262144 without "
        "HALOGEN_ROPE_YARN; HG docs/FLAGS.md @0208581: refused past 262144 x factor",
    },
)

CONTRACTS: dict[tuple[str, str], LaunchContract] = {
    ("llamacpp", "nathanw"): NATHANW,
    ("rocmfpx", "rocm"): ROCMFPX,
    ("ds4", "rocm"): DS4,
    ("halogen", "rocm"): HALOGEN,
}
