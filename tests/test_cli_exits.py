"""How ``lemon`` ends, whatever the command: ``--version`` says lemoncore's version, and a
reader that stops reading (``lemon backends | head -2``) ends it quietly, as Python's
documentation of SIGPIPE recommends, never with a BrokenPipeError traceback. Each runs
``python -m lemoncore.cli`` as a subprocess with a settings-free environment."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest


def environment(tmp_path: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("LEMON_")},
        "LEMON_CACHE_DIR": str(tmp_path),
        "LEMON_CONFIG_FILE": str(tmp_path / "config.toml"),
    }


def test_version_names_the_installed_lemoncore(tmp_path: Path) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", "--version"],
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, f"lemon {version('lemoncore')}\n", "")


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["backends"], 1),
        (["tiers", "--json"], 1),
        (["models", "--all", "--json"], 1),
        (["--help"], 0),  # argparse ignores a failed write of its help itself
    ],
)
def test_a_reader_that_stops_reading_ends_the_command_quietly(
    argv: list[str], status: int, tmp_path: Path
) -> None:
    """stdout is a pipe whose reading end is closed before the command writes: every
    write fails (EPIPE; Python ignores SIGPIPE), as in ``lemon backends | head -0``;
    the status is 1, as Python's documentation has it."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        ran = subprocess.run(
            [sys.executable, "-m", "lemoncore.cli", *argv],
            env=environment(tmp_path),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert ran.stderr == ""  # no traceback, no "Exception ignored"
    assert ran.returncode == status
