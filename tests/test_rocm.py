"""The ROCm runtime decision: a table over install layouts, and the env it injects."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemoncore.installs.rocm import (
    RocmUnavailable,
    RuntimeDecision,
    SystemRocm,
    probe_system_rocm,
    resolve_rocm,
)

THEROCK = Path("/cache/bin/runtime/therock")
MATCHING = SystemRocm(Path("/opt/rocm"), "7.14.2", "/opt/rocm")
MISMATCHING = SystemRocm(Path("/opt/rocm-6.4"), "6.4.1", "ROCM_PATH")


@pytest.mark.parametrize(
    ("therock", "system", "source", "root"),
    [
        (THEROCK, [], "therock", THEROCK),  # TheRock only
        (None, [MATCHING], "system", MATCHING.root),  # matching system ROCm only
        (THEROCK, [MISMATCHING], "therock", THEROCK),  # mismatch never overrides TheRock
        (THEROCK, [MATCHING], "therock", THEROCK),  # installed TheRock comes first
        (None, [MISMATCHING, MATCHING], "system", MATCHING.root),  # first that matches
    ],
)
def test_resolver_prefers_installed_therock_then_a_matching_system_rocm(
    therock: Path | None, system: list[SystemRocm], source: str, root: Path
) -> None:
    decision = resolve_rocm("7.14.0", therock, system)
    assert (decision.source, decision.root) == (source, root)


@pytest.mark.parametrize("system", [[], [MISMATCHING]])
def test_no_runtime_is_a_clear_error(system: list[SystemRocm]) -> None:
    with pytest.raises(RocmUnavailable) as error:
        resolve_rocm("7.14.0", None, system)
    message = str(error.value)
    assert "no ROCm 7.14 runtime" in message
    assert "lemon backends install runtime:therock" in message
    if system:
        assert "/opt/rocm-6.4 (6.4.1, from ROCM_PATH)" in message


def test_linux_injects_the_lib_directory() -> None:
    env = RuntimeDecision("therock", Path("/r"), "7.14.0").env(
        "linux", {"LD_LIBRARY_PATH": "/usr/lib/x", "PATH": "/bin"}
    )
    assert env == {"LD_LIBRARY_PATH": "/r/lib:/usr/lib/x", "ROCM_PATH": "/r"}


def test_windows_injects_bin_on_path_and_hip_path_at_the_root() -> None:
    root = Path("C:/ROCm/7.14")
    env = RuntimeDecision("system", root, "7.14.0").env("windows", {"PATH": "C:/Windows"})
    assert env["HIP_PATH"] == str(root)  # the root, not bin
    assert env["PATH"] == f"{root / 'bin'};C:/Windows"
    assert "LD_LIBRARY_PATH" not in env


def test_probe_reads_versions_from_the_installs(tmp_path: Path) -> None:
    linux = tmp_path / "rocm"
    (linux / ".info").mkdir(parents=True)
    (linux / ".info/version").write_text("7.14.1-55\n")
    windows = tmp_path / "AMD/ROCm/6.4"
    windows.mkdir(parents=True)
    found = probe_system_rocm("linux", {"ROCM_PATH": str(linux)})
    assert found[0] == SystemRocm(linux, "7.14.1", "ROCM_PATH")
    found = probe_system_rocm("windows", {"HIP_PATH": str(windows)})
    assert found == [SystemRocm(windows, "6.4", "HIP_PATH")]
    assert probe_system_rocm("windows", {}) == []


def test_a_recorded_decision_survives_a_restart_and_dies_with_its_root(tmp_path: Path) -> None:
    root = tmp_path / "therock"
    root.mkdir()
    record = tmp_path / "runtime/rocm.json"
    RuntimeDecision("therock", root, "7.14.0").save(record)
    assert RuntimeDecision.load(record) == RuntimeDecision("therock", root, "7.14.0")
    root.rmdir()
    assert RuntimeDecision.load(record) is None
