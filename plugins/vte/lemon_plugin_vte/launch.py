"""The vte-server command line and environment. lemoncore owns lifetime and VRAM policy,
so vte-server's own idle unload and VRAM preflight are switched off."""

from __future__ import annotations

from pathlib import Path

from lemoncore.launch import LaunchContext, LaunchRefused, LaunchSpec

from lemon_plugin_vte.vte_source import TARGET_FAMILY


def find_executable(install_dir: Path) -> Path | None:
    for name in ("vte-server.exe", "vte-server"):
        found = next(iter(sorted(install_dir.rglob(name))), None)
        if found is not None:
            return found
    return None


def build_launch(context: LaunchContext) -> LaunchSpec:
    exe = find_executable(context.install_dir)
    if exe is None:
        raise LaunchRefused(f"vte-server not found in {context.install_dir}; reinstall with "
                            "'lemon backends install vte:rocm'")
    choice = context.config.get("device_index")  # preflight has checked file and host
    argv = (str(exe), "--gguf-path", str(context.model_path), "--port", str(context.port),
            "--host", context.host, "--context-length", str(int(context.options["ctx_size"])),
            "--idle-timeout", "0", "--vram-limit-pct", "0",
            "--parent-pid", str(context.server_pid))
    env = {**context.runtime_env,  # the recorded ROCm runtime: bin on PATH, HIP_PATH = root
           "VTE_TARGET_ARCH_FAMILY": TARGET_FAMILY,  # VTE chooses within it, loudly
           "PYTHONNOUSERSITE": "1"}
    if choice is not None:  # the administrator's HIP index: VTE then skips its checks
        env["VTE_DEVICE_INDEX"] = str(choice)
    return LaunchSpec(argv=argv, env=env)
