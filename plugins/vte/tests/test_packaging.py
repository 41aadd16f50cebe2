"""A user's install: `pip install` of the two packages in a fresh virtual environment."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_pip_install_makes_vte_appear_in_lemon_backends(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT),
                    str(ROOT / "plugins" / "vte")], check=True, capture_output=True)
    listing = subprocess.run([str(env_dir / "bin" / "lemon"), "backends", "--json"],
                             check=True, capture_output=True, text=True,
                             env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    rows = json.loads(listing.stdout)
    vte = next(r for r in rows if r["recipe"] == "vte")
    assert vte["backend"] == "rocm" and vte["tier"] == "experimental"
    assert vte["state"] == "unsupported" if sys.platform != "win32" else vte["state"]
    assert "windows" in vte["message"] or sys.platform == "win32"
