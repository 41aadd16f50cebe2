"""The stand-in ``vte-server``'s hardware side, as VTE 0.3.7's source does it: the HIP DLL
search, device selection, initialisation and the kernel cache VTE writes into its working
directory. Standard library only; ``vte_server_standin.py`` (the process) imports it.
Each function cites the file and function of VTE's source (tag ``0.3.7``) it follows.

What stands in for Windows and the GPU: ``VTE_STANDIN_SYSTEM_DRIVE`` is a folder standing
for ``C:\\`` (its ``Program Files/AMD/HIP/bin`` and ``Program Files/AMD/ROCm/<v>/bin`` are
searched as VTE searches the real ones; unset, a clean machine has none), and
``VTE_STANDIN_HIP_DEVICES`` a JSON list of the HIP device names in HIP order (what
``hipGetDeviceCount``/``hipGetDeviceProperties`` would return).
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

hip_log = logging.getLogger("vte.bridge.hip_runtime")
codegen_log = logging.getLogger("vte.compiler.codegen")
UPSTREAM = Path(__file__).with_name("upstream") / "config.py.txt"  # VTE's own vte/config.py
# The kernels a load uses (codegen.py compile_kernel, called per template from model.py);
# a stand-in's few, not VTE's 63.
TEMPLATES = ("rmsnorm", "gemv_q4k", "flash_attention")


class HIPRuntimeError(Exception):
    pass


def gpu_arch_map(config: Path = UPSTREAM) -> dict[str, str]:
    """``GPU_ARCH_MAP`` read from VTE's ``vte/config.py`` itself (vendored in ``upstream/``)."""
    tree = ast.parse(config.read_text(encoding="utf-8-sig"))
    return next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "GPU_ARCH_MAP"
    )


def gpu_arch(name: str) -> str | None:
    """hip_runtime.py get_gpu_architecture: the first entry, in dict order, that is a
    substring of the lowercased name."""
    lowered = name.lower()
    return next((arch for key, arch in gpu_arch_map().items() if key in lowered), None)


def _amdhip64_in(folder: Path) -> Path | None:
    """dll_discovery.py _find_amdhip64_in: ``amdhip64.dll`` (unversioned) first, else the
    ``amdhip64_*.dll`` that sorts last (the newest major)."""
    if not folder.is_dir():
        return None
    if (folder / "amdhip64.dll").exists():
        return folder / "amdhip64.dll"
    return next(iter(sorted(folder.glob("amdhip64_*.dll"), reverse=True)), None)


def find_hip_dll() -> Path:
    """dll_discovery.py find_hip_dll, in its order: ``%HIP_PATH%\\bin``; ``C:\\Program
    Files\\AMD\\HIP\\bin`` and its ``(x86)`` twin; ``C:\\Program Files\\AMD\\ROCm\\<v>\\bin``,
    names sorted newest first; then each ``PATH`` entry (split on ``;``). None: VTE's
    HIPRuntime.__init__ message (hip_runtime.py L215, a newline inside it)."""
    drive = os.environ.get("VTE_STANDIN_SYSTEM_DRIVE")
    folders = [Path(os.environ["HIP_PATH"]) / "bin"] if os.environ.get("HIP_PATH") else []
    if drive:
        program_files = Path(drive, "Program Files")
        folders += [program_files / "AMD/HIP/bin", Path(drive, "Program Files (x86)/AMD/HIP/bin")]
        rocm = program_files / "AMD/ROCm"
        if rocm.is_dir():
            folders += [d / "bin" for d in sorted(rocm.iterdir(), reverse=True) if d.is_dir()]
    folders += [Path(p) for p in os.environ.get("PATH", "").split(";") if p]
    for folder in folders:
        if (found := _amdhip64_in(folder)) is not None:
            hip_log.info("amdhip64.dll carregada de %s", found)  # HIPRuntime.__init__ L222
            return found
    raise HIPRuntimeError(
        "amdhip64.dll não encontrada. Instale o AMD HIP SDK:\n"
        "https://www.amd.com/en/developer/resources/rocm-hub/hip-sdk.html"
    )


def select_device_index(devices: list[str]) -> int:
    """hip_runtime.py HIPRuntime._select_device_index, branch by branch."""
    forced = os.environ.get("VTE_DEVICE_INDEX")
    if forced is not None:  # wins outright: no enumeration, no map, no family check
        hip_log.info("VTE_DEVICE_INDEX=%s (override manual, sem auto-detecção).", forced)
        return int(forced)  # a non-integer: ValueError, exit 1
    family = os.environ.get("VTE_TARGET_ARCH_FAMILY")
    prefix = family[:-1] if family is not None else None
    count = len(devices)
    if count <= 1:
        if family is not None and count == 1:
            arch = gpu_arch(devices[0])
            if arch is None or not arch.startswith(prefix or ""):
                raise HIPRuntimeError(
                    f"VTE_TARGET_ARCH_FAMILY={family}, mas o único device HIP visível "
                    f"('{devices[0]}', arch {arch or 'desconhecida'}) não pertence a essa "
                    "família."
                )
        return 0  # one device, or none: hipSetDevice(0) decides
    mapped = [
        (i, name, arch) for i, name in enumerate(devices) if (arch := gpu_arch(name)) is not None
    ]  # iGPUs are not in the map
    if prefix is not None:
        kept = [m for m in mapped if m[2].startswith(prefix)]
        if not kept:
            seen = ", ".join(f"('{n}', {gpu_arch(n) or 'desconhecida'})" for n in devices)
            raise HIPRuntimeError(
                f"VTE_TARGET_ARCH_FAMILY={family}, mas nenhum dos {count} devices HIP "
                f"visíveis pertence a essa família ({seen}). Recusando escolher uma "
                "geração não validada."
            )
        mapped = kept
    if not mapped:
        hip_log.warning(
            "Nenhum dos %d devices HIP visíveis bate com uma arquitetura "
            "conhecida (%s); usando device 0 como fallback.",
            count,
            ", ".join(devices),
        )
        return 0
    index, name, _ = mapped[0]
    if len(mapped) == 1:
        hip_log.info(
            "GPU selecionada: %s (device %d) entre %d devices HIP visíveis.", name, index, count
        )
    else:
        hip_log.warning(
            "Múltiplas GPUs AMD suportadas detectadas (%s); usando a primeira "
            "(%s, device %d). Defina VTE_DEVICE_INDEX para escolher outra "
            "explicitamente.",
            ", ".join(m[1] for m in mapped),
            name,
            index,
        )
    return index


def initialize() -> dict[str, Any]:
    """hip_runtime.py HIPRuntime.__init__ (the DLL) and initialize (selection,
    hipSetDevice, the init line): the DLL loaded and the device index, name and arch."""
    dll = find_hip_dll()
    devices = json.loads(os.environ.get("VTE_STANDIN_HIP_DEVICES", "[]"))
    index = select_device_index(devices)
    if not devices:
        raise HIPRuntimeError("hipInit falhou com código 100")
    if not 0 <= index < len(devices):
        raise HIPRuntimeError(f"hipSetDevice({index}) falhou com código 101")
    name = devices[index]
    arch = gpu_arch(name)
    if arch is None:
        hip_log.warning(
            "Arquitetura para GPU '%s' não mapeada. Usando fallback gfx1100.", name.lower()
        )
        arch = "gfx1100"
    hip_log.info("HIP Inicializado. GPU: %s | Arch: %s | CUs: 32 | VRAM: 8176 MB", name, arch)
    return {"index": index, "name": name, "arch": arch, "dll": str(dll)}


def load_kernels(arch: str) -> dict[str, list[str]]:
    """codegen.py CodegenEngine.__init__ and compile_kernel, relative to the working
    directory: ``logs/Codegen`` and ``cache/kernels`` made; per kernel its source written
    to ``logs/Codegen/<template>_<hash>.hip`` (on a cache hit too), then
    ``cache/kernels/<arch>/kernel_<hash>.hsaco`` reused if present, else seeded (VTE
    copies its bundled AOT binary). Returns the kernels reused and written."""
    logs, cache = Path("logs/Codegen"), Path("cache/kernels")
    logs.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    done: dict[str, list[str]] = {"reused": [], "written": []}
    for template in TEMPLATES:
        code = f"// {template}, rendered for {arch}\n"
        digest = hashlib.sha256(code.encode()).hexdigest()[:16]
        binary = cache / arch / f"kernel_{digest}.hsaco"
        binary.parent.mkdir(parents=True, exist_ok=True)
        (logs / f"{template}_{digest}.hip").write_text(code, encoding="utf-8")
        if binary.exists():
            codegen_log.debug("Cache hit: %s", binary)
            done["reused"].append(binary.as_posix())
            continue
        binary.write_bytes(b"stand-in AOT kernel for " + arch.encode())
        codegen_log.debug("Semeado do AOT empacotado: %s", binary)
        done["written"].append(binary.as_posix())
    return done
