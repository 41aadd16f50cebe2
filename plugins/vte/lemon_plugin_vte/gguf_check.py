"""Refuse, before launch, model files vte-server cannot run.

Only the header is read (magic, version, key-value pairs up to ``general.architecture``):
a few kilobytes, not the tensor index, so the check costs nothing on a cold load.
Type codes and the magic come from the ``gguf`` package, imported on first use (it pulls
in numpy, which would otherwise slow every ``lemon serve`` start by half a second).
"""

from __future__ import annotations

import struct
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from lemoncore.plugin import LaunchRefused

if TYPE_CHECKING:
    from gguf import GGUFValueType

SUPPORTED_ARCHITECTURES = frozenset({"qwen2", "granite", "qwen35", "llama"})


@cache
def _scalars() -> dict[GGUFValueType, str]:
    from gguf import GGUFValueType as T

    return {
        T.UINT8: "B",
        T.INT8: "b",
        T.UINT16: "H",
        T.INT16: "h",
        T.UINT32: "I",
        T.INT32: "i",
        T.FLOAT32: "f",
        T.BOOL: "?",
        T.UINT64: "Q",
        T.INT64: "q",
        T.FLOAT64: "d",
    }


def _read(f: BinaryIO, fmt: str) -> int:
    size = struct.calcsize("<" + fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("file ends inside its header")
    value: int = struct.unpack("<" + fmt, data)[0]
    return value


def _string(f: BinaryIO) -> str:
    return f.read(_read(f, "Q")).decode("utf-8", errors="replace")


def _skip(f: BinaryIO, kind: GGUFValueType) -> None:
    from gguf import GGUFValueType as T

    if kind is T.STRING:
        f.seek(_read(f, "Q"), 1)
    elif kind is T.ARRAY:
        item, count = T(_read(f, "I")), _read(f, "Q")
        if item in _scalars():
            f.seek(struct.calcsize("<" + _scalars()[item]) * count, 1)
        else:
            for _ in range(count):
                _skip(f, item)
    else:
        f.seek(struct.calcsize("<" + _scalars()[kind]), 1)


def read_header(path: Path) -> tuple[int, str]:
    """(GGUF version, ``general.architecture``) from the file's header."""
    from gguf import GGUF_MAGIC, GGUFValueType

    with path.open("rb") as f:
        if _read(f, "I") != GGUF_MAGIC:
            raise ValueError("no GGUF magic")
        version = _read(f, "I")
        _read(f, "Q")  # tensor count
        for _ in range(_read(f, "Q")):
            key, kind = _string(f), GGUFValueType(_read(f, "I"))
            if key == "general.architecture" and kind is GGUFValueType.STRING:
                return version, _string(f)
            _skip(f, kind)
    raise ValueError("no general.architecture")


def check_gguf(path: Path) -> str:
    """The file's architecture when VTE supports it; else LaunchRefused saying why."""
    try:
        version, arch = read_header(path)
    except (OSError, ValueError) as exc:
        raise LaunchRefused(f"{path.name} is not a readable GGUF file: {exc}") from exc
    if version != 3:
        raise LaunchRefused(f"{path.name} is GGUF v{version}; VTE reads GGUF v3 only")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise LaunchRefused(
            f"{path.name} is a {arch!r} model; VTE runs "
            f"{', '.join(sorted(SUPPORTED_ARCHITECTURES))} only. Serve it "
            "with another recipe, such as llamacpp"
        )
    return arch
