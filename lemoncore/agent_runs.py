"""``lemon launch`` across targets: the same agent task, non-interactively, once per
model and backend, with what each run cost, written to a results directory.

Per target: load the model on its backend (checked, as ``lemon bench`` does), read the
server's token counters, run the agent with its output captured and no terminal, read
the counters again. Tokens are those the backend reported in its answers' ``usage``
(a stream reports them only when the agent asks for ``include_usage``; else "-").
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NotRequired, TypedDict

import httpx

from lemoncore.agents import Agent, agent_environment, wired
from lemoncore.bench import Target, client_for, select
from lemoncore.jsonfile import write_json


class RunRow(TypedDict):
    """One run, as ``results.json`` holds it: ``exit_code`` ``None`` when the agent did not
    finish (``error`` says why); ``tokens`` ``None`` when the backend reported none;
    ``output`` the file with the agent's stdout."""

    target: str
    exit_code: NotRequired[int | None]
    error: NotRequired[str]
    wall_s: NotRequired[float]
    tokens: NotRequired[int | None]
    output: NotRequired[str]


def tokens(client: httpx.Client, url: str, model: str) -> int:
    """Prompt plus completion tokens the server has counted for ``model``."""
    text = client.get(url + "/metrics").text
    pattern = re.compile(
        rf'^lemon_tokens_total{{model="{re.escape(model)}",kind="\w+"}} (\d+)$', re.MULTILINE
    )
    return sum(int(n) for n in pattern.findall(text))


def run_all(
    url: str,
    agent: Agent,
    binary: str,
    targets: Sequence[Target],
    agent_args: Sequence[str],
    out: Path,
    key: str,
    admin_key: str | None,
    timeout: float,
) -> list[RunRow]:
    """Run the agent once per target (``key`` is the agent's; ``admin_key`` loads the
    targets), each run with a config directory of its own; a row per run, also in
    ``out/results.json``."""
    out.mkdir(parents=True, exist_ok=True)
    rows: list[RunRow] = []
    with client_for(admin_key) as client:
        for target in targets:
            row: RunRow = {"target": target.label}
            folder = out / re.sub(r"[^A-Za-z0-9._@-]", "_", target.label)
            folder.mkdir(exist_ok=True)
            try:
                select(client, url, target)
                before = tokens(client, url, target.model)
                with wired(agent, f"{url}/v1", target.model, key, agent_args) as wiring:
                    started = time.perf_counter()
                    try:
                        done = subprocess.run(
                            [binary, *wiring.argv[1:]],
                            env=agent_environment(os.environ, wiring),
                            stdin=subprocess.DEVNULL,
                            capture_output=True,
                            timeout=timeout,
                            check=False,
                        )
                        row["exit_code"] = done.returncode
                        stdout, stderr = done.stdout, done.stderr
                    except subprocess.TimeoutExpired as exc:
                        row["exit_code"] = None
                        row["error"] = f"timed out after {timeout:.0f} s"
                        stdout, stderr = exc.stdout or b"", exc.stderr or b""
                    row["wall_s"] = round(time.perf_counter() - started, 2)
                used = tokens(client, url, target.model) - before
                row["tokens"] = used if used > 0 else None
                (folder / "stdout.txt").write_bytes(stdout)
                (folder / "stderr.txt").write_bytes(stderr)
                row["output"] = str(folder / "stdout.txt")
            except (httpx.HTTPError, RuntimeError) as exc:
                row["exit_code"], row["error"] = None, str(exc)
            rows.append(row)
    write_json(out / "results.json", rows)
    return rows
