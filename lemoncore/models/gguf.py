"""The key-value metadata of a GGUF file (versions 2 and 3), read from its header.

Arrays (the tokenizer's vocabulary, say) are skipped and reported by length only, so a
header is read in one pass without holding the vocabulary. Results are cached per file
(path, size and modification time). A file that is not GGUF, or is cut short, has no
metadata (``{}``).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# A scalar metadata value.
GgufValue = str | int | float | bool


@dataclass(frozen=True)
class GgufArray:
    """An array value, skipped: its element type and length."""

    type: int
    length: int


_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
_MAX_STRING = 1 << 26  # a longer "string" means the file is not what it claims


class _Truncated(Exception):
    pass


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _Truncated
    return data


def _unpack(f: BinaryIO, fmt: str) -> int | float | bool:
    value: int | float | bool = struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
    return value


def _string(f: BinaryIO) -> str:
    length = int(_unpack(f, "<Q"))
    if length > _MAX_STRING:
        raise _Truncated
    return _read(f, length).decode("utf-8", errors="replace")


def _skip(f: BinaryIO, kind: int, count: int) -> None:
    if kind == _STRING:
        for _ in range(count):
            length = int(_unpack(f, "<Q"))
            f.seek(length, 1)
    elif kind in _SCALARS:
        f.seek(struct.calcsize(_SCALARS[kind]) * count, 1)
    else:  # nested arrays: never written by llama.cpp's converters
        raise _Truncated


def _value(f: BinaryIO, kind: int) -> GgufValue | GgufArray:
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        inner, length = int(_unpack(f, "<I")), int(_unpack(f, "<Q"))
        _skip(f, inner, length)
        return GgufArray(inner, length)
    if kind not in _SCALARS:
        raise _Truncated
    return _unpack(f, _SCALARS[kind])


def read_gguf_metadata(path: Path) -> dict[str, GgufValue | GgufArray]:
    """``path``'s metadata by key; ``{}`` when it is not a readable GGUF file."""
    try:
        stat = path.stat()
    except OSError:
        return {}
    return dict(_cached(path, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _cached(path: Path, size: int, mtime_ns: int) -> tuple[tuple[str, GgufValue | GgufArray], ...]:
    try:
        with path.open("rb") as f:
            if f.read(4) != b"GGUF" or int(_unpack(f, "<I")) not in (2, 3):
                return ()
            _unpack(f, "<Q")  # tensor count
            items = []
            for _ in range(int(_unpack(f, "<Q"))):
                key = _string(f)
                items.append((key, _value(f, int(_unpack(f, "<I")))))
            return tuple(items)
    except (OSError, _Truncated, struct.error):
        return ()


def trained_context(metadata: Mapping[str, GgufValue | GgufArray]) -> int | None:
    """The context the model was trained for: ``<arch>.context_length``, where ``arch``
    is ``general.architecture``; ``None`` when the metadata does not say."""
    found = metadata.get(f"{metadata.get('general.architecture')}.context_length")
    return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else None
