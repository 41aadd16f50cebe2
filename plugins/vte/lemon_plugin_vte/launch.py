"""The vte-server command line and environment. lemoncore owns lifetime and VRAM policy,
so vte-server's own idle unload and VRAM preflight are switched off."""

from __future__ import annotations

from pathlib import Path

from lemoncore.plugin import LaunchContext, LaunchRefused, LaunchSpec

from lemon_plugin_vte.vte_source import TARGET_FAMILY

# VTE's own words (Portuguese) for a start that cannot succeed by trying again, read in
# VTE 0.3.7 (/work/shared/reference/vte.md, "Exit 1" and S1): lemoncore never retries it
# and evicts nothing for it (VTE's family refusal once evicted a CPU model and started
# VTE twice).
HOPELESS = (
    # vte/server http_server._select_device_index: the GPU is outside VTE_TARGET_ARCH_FAMILY
    r"não pertence a essa família",
    r"Recusando escolher uma geração não validada",
    r"amdhip64\.dll não encontrada",  # hip_runtime.py: no HIP runtime installed
    r"Arquivo GGUF não encontrado",  # a missing model file
    r"Arquitetura não suportada",  # gguf_parser: an architecture VTE does not run
    r"Dtype GGUF não suportado",  # dequantizer.to_fp16_bytes: a type VTE cannot read
    r"Magic number inválido|Versão GGUF não suportada",  # gguf_parser: not a GGUF v3 file
)
# ... and for a want of VRAM, which evicting other models may free: its preflight
# (http_server._check_vram_preflight) and qwen_mapper.format_oom_error
OUT_OF_MEMORY = (r"VRAM livre atual .* está abaixo do limite", r"OOM Preventivo")


def find_executable(install_dir: Path) -> Path | None:
    for name in ("vte-server.exe", "vte-server"):
        found = next(iter(sorted(install_dir.rglob(name))), None)
        if found is not None:
            return found
    return None


def build_launch(context: LaunchContext) -> LaunchSpec:
    exe = find_executable(context.install_dir)
    if exe is None:
        raise LaunchRefused(
            f"vte-server not found in {context.install_dir}; reinstall with "
            "'lemon backends install vte:rocm'"
        )
    choice = context.config.get("device_index")  # preflight has checked file and host
    argv = (
        str(exe),
        "--gguf-path",
        str(context.model_path),
        "--port",
        str(context.port),
        "--host",
        context.host,
        "--context-length",
        str(int(context.options["ctx_size"])),
        "--idle-timeout",
        "0",
        "--vram-limit-pct",
        "0",
        "--parent-pid",
        str(context.server_pid),
    )
    env = {
        **context.runtime_env,  # the recorded ROCm runtime: bin on PATH, HIP_PATH = root
        "VTE_TARGET_ARCH_FAMILY": TARGET_FAMILY,  # VTE chooses within it, loudly
        "PYTHONNOUSERSITE": "1",
    }
    if choice is not None:  # the administrator's HIP index: VTE then skips its checks
        env["VTE_DEVICE_INDEX"] = str(choice)
    return LaunchSpec(argv=argv, env=env, hopeless=HOPELESS, out_of_memory=OUT_OF_MEMORY)
