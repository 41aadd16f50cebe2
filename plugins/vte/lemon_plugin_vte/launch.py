"""The vte-server command line, environment and working directory, and VTE's own words for
a start that failed. lemoncore owns lifetime and VRAM policy, so vte-server's own idle
unload and VRAM preflight are switched off.

Sources: VTE tag ``0.3.7`` (commit ``274fdb0``), files under ``vte/``.
"""

from __future__ import annotations

import re
from pathlib import Path

from lemoncore.plugin import HostInfo, LaunchContext, LaunchRefused, LaunchSpec

from lemon_plugin_vte.devices import assess
from lemon_plugin_vte.vte_source import TARGET_FAMILY

# A letter outside ASCII as lemoncore reads it. VTE logs to stdout in its stdout's encoding
# (``bridge/logger.py`` ``SafeStreamHandler.emit``: unencodable letters become "?"). Its
# release is a PyInstaller bundle (``docs/LEMONADE.md``; ``pyproject.toml`` dev extra
# ``pyinstaller>=6.10.0``), and PyInstaller 6 starts Python isolated (PyInstaller v6.10.0
# ``bootloader/src/pyi_pythonlib.c`` ``PyConfig_InitIsolatedConfig``, ``pyi_pyconfig.c``
# ``pyi_pyconfig_preinit_python``; ``doc/spec-files.rst`` "Specifying Python Interpreter
# Options": variables "such as PYTHONUTF8" do not apply). PYTHONIOENCODING and PYTHONUTF8
# would change nothing, so they are not set: on a pipe VTE writes Windows' ANSI code page
# (cp1252 on Portuguese and English systems) unless its bundle was built with ``X utf8``.
# lemoncore reads a line that is not UTF-8 in that code page
# (``lemoncore.outputlines.SYSTEM_ENCODING``), so "ã" arrives as itself, as "?" where
# VTE's console could not encode it, or as U+FFFD per byte when the two disagree.
_NOT_ASCII = "(?:\ufffd\ufffd|.)"


def vte_said(words: str) -> str:
    """A regular expression for VTE's message ``words`` (``…`` stands for what varies),
    matching whichever encoding VTE wrote it in."""
    return ".*".join(
        "".join(re.escape(c) if c.isascii() else _NOT_ASCII for c in part)
        for part in words.split("…")
    )


# A start that trying again cannot help: lemoncore evicts nothing for it and holds the
# model off at once. Each is a message ``http_server.py`` ``cli_main`` logs before exit 1
# ("Falha ao carregar o modelo, encerrando: <message>"), or argparse's exit 2.
HOPELESS = tuple(
    map(
        vte_said,
        (
            # bridge/hip_runtime.py HIPRuntime._select_device_index L384, L407: no GPU
            # of VTE_TARGET_ARCH_FAMILY (one device / several devices)
            "não pertence a essa família",
            "Recusando escolher uma geração não validada",
            # HIPRuntime.__init__ L215: dll_discovery.find_hip_dll found no HIP runtime
            "amdhip64.dll não encontrada",
            # HIPRuntime.initialize L437, L444: no usable GPU, or an index out of range
            "hipInit falhou com código",
            "hipSetDevice(…) falhou com código",
            # core/model.py VTEModel.from_path L199: no model file
            "Arquivo GGUF não encontrado",
            # compiler/sanitizer.py GGUFSanitizer.validate: a file VTE refuses
            "Magic number inválido",
            "Versão GGUF não suportada",
            "Tensor count excessivo",
            "KV count excessivo",
            "Arquitetura não suportada",
            "context_length suspeito",
            "Hash não corresponde",
            # compiler/ggml_types.py block_size_bytes L62, dequantizer.py to_fp16_bytes L561
            "Dtype GGML desconhecido",
            "Dtype GGUF não suportado para dequantização",
            # server/http_server.py _parse_args: argparse.ArgumentParser.error (English)
            "vte-server: error: ",
        ),
    )
)
# ... and for a want of VRAM, which evicting other models may free: the preventive checks
# (compiler/qwen_mapper.py format_oom_error L26; bridge/hip_runtime.py allocate L594,
# L612) and a failed allocation (L626).
OUT_OF_MEMORY = tuple(map(vte_said, ("OOM Preventivo", "hipMalloc falhou com OOM")))


def find_executable(install_dir: Path) -> Path | None:
    for name in ("vte-server.exe", "vte-server"):
        found = next(iter(sorted(install_dir.rglob(name))), None)
        if found is not None:
            return found
    return None


def work_dir(install_dir: Path, arch: str) -> Path:
    """VTE's working directory: ``<install>/work/<arch>`` (the family when lemoncore cannot
    know the arch), kept across loads and removed with the install.

    VTE writes there, relative to its working directory, the kernels it compiles or
    seeds from its bundle, ``cache/kernels/<arch>/kernel_<hash>.hsaco``, and the source of
    every kernel it uses, ``logs/Codegen/<template>_<hash>.hip`` (``compiler/codegen.py``
    ``CodegenEngine.__init__`` and ``compile_kernel``, from ``core/model.py``); a cached
    kernel is reused on the next load."""
    return install_dir / "work" / (arch or TARGET_FAMILY)


def build_launch(context: LaunchContext, host: HostInfo) -> LaunchSpec:
    exe = find_executable(context.install_dir)
    if exe is None:
        raise LaunchRefused(
            f"vte-server not found in {context.install_dir}; reinstall with "
            "'lemon backends install vte:rocm'"
        )
    choice = context.config.get("device_index")  # preflight has checked file and host
    cwd = work_dir(context.install_dir, assess(host, choice).arch)
    cwd.mkdir(parents=True, exist_ok=True)  # local and instant, like the search above
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
        "PYTHONNOUSERSITE": "1",  # as Lemonade's adapter sets it (a bundle ignores it)
    }
    if choice is not None:  # the administrator's HIP index: VTE then skips its checks
        env["VTE_DEVICE_INDEX"] = str(choice)
    return LaunchSpec(argv=argv, env=env, cwd=cwd, hopeless=HOPELESS, out_of_memory=OUT_OF_MEMORY)
