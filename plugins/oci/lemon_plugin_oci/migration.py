"""Lemonade's native DS4, which the ``ds4:rocm`` container replaces.

Lemonade's ``ds4-backend`` branch installed ``lemonade-sdk/ds4-rocm`` release ``b0001``
into ``<cache>/bin/ds4/rocm/`` (``ds4-server`` found by a recursive name search,
``version.txt`` beside it; ``ds4_server.cpp``, ``backend_utils.cpp``), where ``<cache>``
is, in Lemonade's order (``path_utils.cpp``, ``platform/path_linux.cpp``):
``$LEMONADE_CACHE_DIR``, ``$CACHE_DIRECTORY`` (set by systemd for ``lemond.service``:
``/var/cache/lemonade``; lemoncore's own ``$CACHE_DIRECTORY`` is not Lemonade's, so that
path is checked directly), ``$XDG_CACHE_HOME/lemonade``, ``~/.cache/lemonade``. Its
models live in the Hugging Face cache (checkpoint ``antirez/deepseek-v4-gguf:<file>``),
which lemoncore shares: they stay and are used.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lemoncore.plugin import Migration

NAME = "ds4"


SYSTEM_CACHE = Path("/var/cache/lemonade")


def lemonade_caches(env: Mapping[str, str], home: Path, system: Path) -> list[Path]:
    found = [Path(env["LEMONADE_CACHE_DIR"])] if env.get("LEMONADE_CACHE_DIR") else []
    found.append(system)
    found.append(
        Path(env["XDG_CACHE_HOME"]) / "lemonade"
        if env.get("XDG_CACHE_HOME")
        else home / ".cache" / "lemonade"
    )
    return found


def native_ds4(env: Mapping[str, str], home: Path, system: Path = SYSTEM_CACHE) -> Migration | None:
    """Lemonade's native DS4 install, if one is left; never removed here."""
    for cache in lemonade_caches(env, home, system):
        install = cache / "bin" / "ds4" / "rocm"
        if (install / "version.txt").is_file() or any(install.glob("**/ds4-server")):
            version = (
                (install / "version.txt").read_text().strip()
                if (install / "version.txt").is_file()
                else "unknown version"
            )
            return Migration(
                NAME,
                f"Lemonade's native DS4 ({version}) at {install} is "
                "replaced by the ds4:rocm container backend; its models in the "
                "Hugging Face cache are kept and used",
                (install,),
            )
    return None
