"""Draw benchmarks/results/latest.png from a result JSON (needs matplotlib)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

result = json.loads(Path(sys.argv[1]).read_text())
systems = list(result["stream"])
fig, axes = plt.subplots(1, 3, figsize=(13, 4))
for ax, (title, values) in zip(
    axes,
    [
        ("decode tok/s (p50, p10-p90)", [result["stream"][s]["decode_tps"] for s in systems]),
        ("time to first token, ms", [result["stream"][s]["ttft_ms"] for s in systems]),
    ],
    strict=False,
):
    mids = [v["p50"] for v in values]
    errs = [[v["p50"] - v["p10"] for v in values], [v["p90"] - v["p50"] for v in values]]
    ax.bar(systems, mids, yerr=errs, capsize=4, color="#f2c14e")
    ax.set_title(title)
rps = result["requests_per_s"]
for system in systems:
    axes[2].plot(
        ["c1", "c8", "c32"], [rps[system][c] for c in ("c1", "c8", "c32")], marker="o", label=system
    )
axes[2].set_title("non-streaming requests/s by concurrency")
axes[2].legend()
fig.suptitle(f"{result['machine']['model']}, {result['machine']['cpus']} CPUs")
fig.tight_layout()
fig.savefig(Path(sys.argv[2]), dpi=110)
