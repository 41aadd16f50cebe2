"""The vte-server command line and environment. lemoncore owns lifetime and VRAM policy,
so vte-server's own idle unload and VRAM preflight are switched off."""

from __future__ import annotations

from pathlib import Path

from lemoncore.hosts import HostInfo
from lemoncore.launch import LaunchContext, LaunchRefused, LaunchSpec

from lemon_plugin_vte.devices import select_device
from lemon_plugin_vte.gguf_check import check_gguf
from lemon_plugin_vte.recipe import ARCH_FAMILY


def find_executable(install_dir: Path) -> Path | None:
    for name in ("vte-server.exe", "vte-server"):
        found = next(iter(sorted(install_dir.rglob(name))), None)
        if found is not None:
            return found
    return None


def build_launch(context: LaunchContext, host: HostInfo) -> LaunchSpec:
    exe = find_executable(context.install_dir)
    if exe is None:
        raise LaunchRefused(f"vte-server not found in {context.install_dir}; reinstall with "
                            "'lemon backends install vte:rocm'")
    check_gguf(context.model_path)
    choice = context.config.get("device_index")
    selection = select_device(host, None if choice is None else int(choice))
    if selection.device is None:
        raise LaunchRefused(selection.refusal)
    argv = (str(exe), "--gguf-path", str(context.model_path), "--port", str(context.port),
            "--host", context.host, "--context-length", str(int(context.options["ctx_size"])),
            "--idle-timeout", "0", "--vram-limit-pct", "0",
            "--parent-pid", str(context.server_pid))
    env = {**context.runtime_env,  # the recorded ROCm runtime: bin on PATH, HIP_PATH = root
           "VTE_TARGET_ARCH_FAMILY": ARCH_FAMILY,
           "VTE_DEVICE_INDEX": str(selection.device.index),
           "PYTHONNOUSERSITE": "1"}
    return LaunchSpec(argv=argv, env=env)
