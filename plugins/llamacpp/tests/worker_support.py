"""A ``lemon worker`` process for the worker tests: started with its output in a log
file, its supervised rpc-server's state file read and waited on, and whether a process
is still alive (not a zombie)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lemoncore.cli.worker import state_file


@dataclass
class Worker:
    proc: subprocess.Popen[str]
    port: int
    cache_dir: Path

    def state(self) -> dict[str, Any]:
        return dict(json.loads(state_file(self.cache_dir, self.port).read_text()))

    def wait_state(self, predicate: Any, within: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + within
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.cache_dir / "worker.log").read_text()
            try:
                last = self.state()
            except (OSError, ValueError):
                pass
            else:
                if predicate(last):
                    return last
            time.sleep(0.02)
        raise AssertionError(f"state not reached; last: {last}")


def start_worker(cache_dir: Path, *args: str) -> subprocess.Popen[str]:
    """``lemon worker ARGS``; its output goes to ``cache_dir/worker.log`` (a pipe nobody
    reads could fill up and stall it)."""
    with (cache_dir / "worker.log").open("a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "lemoncore.cli.worker", *args],
            env={**os.environ, "LEMON_CACHE_DIR": str(cache_dir)},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def finish(proc: subprocess.Popen[str], cache_dir: Path, within: float = 30) -> str:
    """Wait for ``proc`` to end; its output."""
    proc.wait(timeout=within)
    return (cache_dir / "worker.log").read_text()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")
