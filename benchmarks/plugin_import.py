"""Import time of the real plugins' entry-point modules, two trees side by side.

``python benchmarks/plugin_import.py OLD_TREE NEW_TREE`` imports each plugin's entry-point
module (what ``lemon`` imports at every start) in a fresh interpreter, with each tree's
lemoncore and plugins first on ``sys.path``, interleaved (old, new, old, ...) so a busy
machine slows both alike; it prints the best of ``ROUNDS`` wall-clock seconds per plugin
and tree, and which heavy modules the import loaded. Run it from a directory outside
both trees (the current directory comes first on ``sys.path``). Make the old tree with
``git worktree add /tmp/base HEAD``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PLUGINS = {
    "lemon_plugin_llamacpp": "llamacpp",
    "lemon_plugin_vte": "vte",
    "lemon_plugin_oci": "oci",
    "lemon_plugin_ollama_api": "ollama-api",
}
HEAVY = ("starlette", "hypercorn", "httpx", "httpcore", "huggingface_hub", "pydantic_settings")
ROUNDS = 5
PROBE = """
import sys, time, json
t = time.perf_counter()
import {module}
took = time.perf_counter() - t
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))
print(json.dumps([took, heavy]))
"""


def once(tree: Path, module: str) -> tuple[float, list[str]]:
    path = [str(tree), *(str(tree / "plugins" / name) for name in PLUGINS.values())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    code = PROBE.format(module=module, heavy=HEAVY)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    took, heavy = json.loads(out)
    return float(took), list(heavy)


def main(old: Path, new: Path) -> None:
    print("| Plugin | before (s) | after (s) | loaded before | loaded after |")
    print("|---|---|---|---|---|")
    for module in PLUGINS:
        times: dict[Path, list[float]] = {old: [], new: []}
        heavy: dict[Path, list[str]] = {}
        for _ in range(ROUNDS):
            for tree in (old, new):
                took, heavy[tree] = once(tree, module)
                times[tree].append(took)
        print(
            f"| `{module}` | {min(times[old]):.3f} | {min(times[new]):.3f} | "
            f"{', '.join(heavy[old]) or '-'} | {', '.join(heavy[new]) or '-'} |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())
