"""A user's install: `pip install` of the two packages in a fresh virtual environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

from lemoncore.plugin import detect_host

from lemon_plugin_vte.devices import assess
from lemon_plugin_vte.recipe import RECIPE

ROOT = Path(__file__).resolve().parents[3]
WINDOWS = sys.platform == "win32"


def user_environment(home: Path) -> dict[str, str]:
    """A user's minimal environment with ``home`` as their home: on Windows also what
    Python and the GPU query need (``SystemRoot``, PowerShell on ``PATH``) and the
    profile folders lemoncore keeps its files in."""
    if not WINDOWS:
        return {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    return {
        "HOME": str(home),
        "USERPROFILE": str(home),
        "PATH": os.environ["PATH"],
        "SystemRoot": os.environ["SystemRoot"],
        "APPDATA": str(home / "Roaming"),
        "LOCALAPPDATA": str(home / "Local"),
    }


def test_pip_install_makes_vte_appear_in_lemon_backends(tmp_path: Path) -> None:
    """The installed ``lemon`` lists vte with the state this machine gets: unsupported,
    naming Windows, off Windows or without a GPU VTE runs (on Windows the verdict is the
    plugin's own, whose cases test_devices.py covers; here only that the installed
    packages reach it), and not yet installed where VTE could run."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    scripts, exe = (env_dir / "Scripts", ".exe") if WINDOWS else (env_dir / "bin", "")
    subprocess.run(
        [
            str(scripts / f"python{exe}"),
            "-m",
            "pip",
            "install",
            "-q",
            str(ROOT),
            str(ROOT / "plugins" / "vte"),
        ],
        check=True,
        capture_output=True,
    )
    listing = subprocess.run(
        [str(scripts / f"lemon{exe}"), "backends", "--json"],
        check=True,
        capture_output=True,
        text=True,
        env=user_environment(tmp_path),
    )
    rows = json.loads(listing.stdout)
    vte = next(r for r in rows if r["recipe"] == "vte")
    assert vte["backend"] == "rocm" and vte["tier"] == "experimental"
    host = detect_host()
    [backend] = RECIPE.backends
    if not any(host.supports(row) for row in backend.support):  # every OS but Windows
        assert vte["state"] == "unsupported", vte
        assert "needs windows with amd_gpu(" in vte["message"], vte
        return
    verdict = assess(host)  # Windows with an AMD GPU in the gfx110X family
    if not verdict.supported:
        assert (vte["state"], vte["message"]) == ("unsupported", verdict.message)
        return
    assert vte["state"] in {"installable", "action_required"}, vte  # nothing installed yet
