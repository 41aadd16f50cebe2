"""On Windows (no ``grp``, no ``resource``) the plugin loads and its backends say they are
unsupported there, rather than the plugin failing to import. Simulated: the modules are
made unimportable in a fresh interpreter, the host is a Windows one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHECK = """
import json, sys
sys.modules["grp"] = None       # import grp -> ImportError, as on Windows
sys.modules["resource"] = None
from lemoncore.core import build_core
from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.recipes import DeviceKind
from lemoncore.settings import Settings
host = HostInfo("windows", (HostDevice(DeviceKind.CPU, "cpu"),))
core = build_core(Settings(cache_dir=sys.argv[1], plugins_allow="oci"), host=host)
[oci] = [r for r in core.plugins.records if r.name == "oci"]
states = {s.name: s.state.value for r in ("ds4", "rocmfpx", "halogen")
          for s in core.backends.statuses(core.plugins.registry.recipes[r])}
print(json.dumps({"status": oci.status, "error": oci.error, "states": states}))
"""


def test_the_plugin_loads_where_grp_and_resource_are_missing(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHECK, str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out.splitlines()[-1])
    assert (result["status"], result["error"]) == ("loaded", "")
    assert set(result["states"].values()) == {"unsupported"}, result["states"]
