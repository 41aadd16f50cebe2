"""The ROCm runtime, decided once: TheRock (installed by lemoncore) or a system ROCm.

:func:`resolve_rocm` is pure over what it is shown; :func:`probe_system_rocm` reads the
candidate installs. The decision is recorded (``RuntimeDecision.save``) when a backend
that needs ROCm is installed, and launch uses the record: it never guesses again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from lemoncore.errors import LemonError
from lemoncore.jsonfile import write_json
from lemoncore.platforms import path_list


class RocmUnavailable(LemonError):
    """No usable ROCm runtime; the message says how to get one."""

    status, type, code = 503, "backend_error", "rocm_unavailable"


@dataclass(frozen=True)
class SystemRocm:
    root: Path
    version: str  # e.g. "7.14.0"; "" when unreadable
    origin: str  # ROCM_PATH | HIP_PATH | /opt/rocm


@dataclass(frozen=True)
class RuntimeDecision:
    source: str  # therock | system
    root: Path
    version: str

    def env(self, os_name: str, inherited: Mapping[str, str]) -> dict[str, str]:
        """Environment additions that make a child load this runtime."""
        if os_name == "windows":
            return {
                "PATH": path_list(os_name, str(self.root / "bin"), inherited.get("PATH", "")),
                "HIP_PATH": str(self.root),
            }
        return {
            "LD_LIBRARY_PATH": path_list(
                os_name, str(self.root / "lib"), inherited.get("LD_LIBRARY_PATH", "")
            ),
            "ROCM_PATH": str(self.root),
        }

    def save(self, path: Path) -> None:
        write_json(path, {**asdict(self), "root": str(self.root)})

    @classmethod
    def load(cls, path: Path) -> RuntimeDecision | None:
        try:
            data = json.loads(path.read_text())
            decision = cls(data["source"], Path(data["root"]), data["version"])
        except (OSError, ValueError, KeyError):
            return None
        return decision if decision.root.is_dir() else None


def has_hip_runtime(root: Path) -> bool:
    """A real HIP payload, not just a directory: ``libamdhip64.so*`` or ``amdhip64*.dll``."""
    return any(root.glob("lib/libamdhip64.so*")) or any(root.glob("bin/amdhip64*.dll"))


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])


def resolve_rocm(
    pinned: str, therock_installed: Path | None, system: Sequence[SystemRocm]
) -> RuntimeDecision:
    """TheRock when installed; else the first system ROCm matching the pinned major.minor.

    A mismatching system ROCm never wins over TheRock, and is never used at all.
    """
    if therock_installed is not None:
        return RuntimeDecision("therock", therock_installed, pinned)
    for candidate in system:
        if candidate.version and _major_minor(candidate.version) == _major_minor(pinned):
            return RuntimeDecision("system", candidate.root, candidate.version)
    seen = (
        ", ".join(f"{c.root} ({c.version or 'unknown version'}, from {c.origin})" for c in system)
        or "none"
    )
    raise RocmUnavailable(
        f"no ROCm {'.'.join(_major_minor(pinned))} runtime: system installs found: {seen}. "
        "Install TheRock with 'lemon backends install runtime:therock', or point ROCM_PATH "
        f"at a ROCm {'.'.join(_major_minor(pinned))} install"
    )


def probe_system_rocm(os_name: str, env: Mapping[str, str]) -> list[SystemRocm]:
    """Candidate system installs in order: ROCM_PATH, HIP_PATH (Windows), /opt/rocm."""
    candidates: list[tuple[str, str]] = []
    if env.get("ROCM_PATH"):
        candidates.append((env["ROCM_PATH"], "ROCM_PATH"))
    if os_name == "windows" and env.get("HIP_PATH"):
        candidates.append((env["HIP_PATH"], "HIP_PATH"))
    if os_name == "linux":
        candidates.append(("/opt/rocm", "/opt/rocm"))
    found = []
    for root, origin in candidates:
        path = Path(root)
        if path.is_dir():
            found.append(SystemRocm(path, _read_version(path), origin))
    return found


def _read_version(root: Path) -> str:
    """``.info/version`` (Linux installs, e.g. ``6.4.1-83``) or a versioned directory name
    (Windows: ``C:/Program Files/AMD/ROCm/6.4``)."""
    try:
        return (root / ".info" / "version").read_text().strip().split("-")[0]
    except OSError:
        name = root.resolve().name
        return name if name[:1].isdigit() else ""
