"""Draw the relay sweep (``sweep.py``'s JSON) as a chart (needs matplotlib).

Usage: ``plot_sweep.py RESULT.json OUT.png [BEFORE.json]``: with BEFORE, its lemoncore
line is drawn too, dashed, as "lemoncore before".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

result = json.loads(Path(sys.argv[1]).read_text())
lines = dict(result["sweep"])
if len(sys.argv) > 3:
    lines["lemoncore before"] = json.loads(Path(sys.argv[3]).read_text())["sweep"]["lemoncore"]
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
for name, cells in lines.items():
    streams = [int(n) for n in cells]
    style = "--" if "before" in name else "-"
    axes[0].plot(
        streams, [c["chunks_per_s"] for c in cells.values()], style, marker="o", label=name
    )
    axes[1].plot(
        streams, [c["cpu_us_per_chunk"] for c in cells.values()], style, marker="o", label=name
    )
for ax, title in zip(
    axes, ("SSE chunks/s delivered to clients", "server CPU µs per chunk"), strict=True
):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent streams")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
axes[0].legend()
fig.suptitle(
    f"zero-work upstream, {result['machine']['tokens']} tokens per stream, "
    f"{result['machine']['cpus']} CPUs"
)
fig.tight_layout()
fig.savefig(Path(sys.argv[2]), dpi=110)
