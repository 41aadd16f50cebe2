"""Field checks for ``lemon validate vte:rocm``: the GPU vte-server initialised, as its
own log says (``hip_runtime.py``: ``HIP Inicializado. GPU: <name> | Arch: <gfx>``), and
whether the engine that ran is VTE's release binary. Registered by the plugin's
``register_field_checks`` hook."""

from __future__ import annotations

import re
from pathlib import Path

from lemoncore.plugin import FieldCheck, FieldContext, FieldResult, amd_family

from lemon_plugin_vte.vte_source import SUPPORTED_ARCHS

INITIALISED = re.compile(r"HIP Inicializado\. GPU: (?P<name>.+?) \| Arch: (?P<arch>\w+)")


def initialised(lines: list[str]) -> tuple[str, str] | None:
    """(GPU name, arch) from the last initialisation line vte-server logged."""
    found = [m for line in lines if (m := INITIALISED.search(line))]
    return (found[-1]["name"], found[-1]["arch"]) if found else None


def standin(executable: Path) -> str:
    """Why ``executable`` is not VTE's release build (a Windows PE file, ``MZ``), or ""."""
    try:
        head = executable.read_bytes()[:2]
    except OSError as exc:
        return f"vte-server at {executable} cannot be read ({exc.strerror})"
    return (
        ""
        if head == b"MZ"
        else (
            f"vte-server at {executable} is not a Windows "
            "executable: a stand-in, not VTE's release build"
        )
    )


def device(context: FieldContext) -> FieldResult:
    """The GPU vte-server initialised is in VTE's family and is what its name says."""
    found = initialised(context.engine_log())
    assert found is not None, (
        "vte-server never logged the GPU it initialised ('HIP "
        "Inicializado. GPU: ...'); its output is in server.log"
    )
    name, arch = found
    known = amd_family(name)
    facts = {"device": name, "arch": arch, **({"family": known} if known else {})}
    supported = ", ".join(sorted(SUPPORTED_ARCHS))
    assert arch in SUPPORTED_ARCHS, (
        f"vte-server runs on {name} ({arch}), outside the architectures it supports ({supported})"
    )
    assert not known or known == arch, (
        f"vte-server runs {arch} kernels on {name}, a {known} GPU: set recipes.vte.device_index"
    )
    return FieldResult(facts, standin(Path(str(context.loaded["launch_command"][0]))))


FIELD_CHECKS = [FieldCheck("device", "the GPU vte-server initialised, from its log", device)]
