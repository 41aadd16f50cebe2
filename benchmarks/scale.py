"""How cost grows with the catalogue and the fleet: ``GET /v1/models`` (and
``?show_all=true``) latency with 100 to 10,000 models, and the load decision
(``planner.plan``, ``eviction.decide``) with 1 to 256 loaded servers. In-process (the
app through httpx's ASGI transport), so only lemoncore's own work is timed.

Run: ``python benchmarks/scale.py`` (``--smoke`` for a quick check). Prints a markdown
table and writes ``<out>/scale-<stamp>.json``; the growth column is the cost per item at
the largest size over that at the smallest (1.0 is linear).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent


def timed(reps: int, fn: Any, *args: Any) -> float:
    """Median seconds of ``reps`` calls of ``fn(*args)``."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def models_latency(sizes: list[int], reps: int) -> dict[str, dict[str, float]]:
    from lemoncore import Settings, create_app

    out: dict[str, dict[str, float]] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="lemon-scale-") as tmp:
            cache = Path(tmp) / "cache"
            cache.mkdir()
            weights = Path(tmp) / "w.gguf"
            weights.write_bytes(b"GGUF")
            (cache / "user_models.json").write_text(
                json.dumps(
                    [
                        {
                            "name": f"user.m{i}",
                            "recipe": "llamacpp",
                            "checkpoint": f"file:{weights}",
                            "labels": ["custom"],
                        }
                        for i in range(n)
                    ]
                )
            )
            os.environ["LEMON_CONFIG_FILE"] = str(Path(tmp) / "config.toml")
            app = create_app(Settings(cache_dir=cache, model_dirs=[Path(tmp)]))
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app), base_url="http://localhost"
                ) as client,
            ):
                cells = {}
                for query in ("", "?show_all=true"):
                    times = []
                    for _ in range(max(3, reps * 100 // n)):
                        start = time.perf_counter()
                        response = await client.get("/v1/models" + query)
                        times.append(time.perf_counter() - start)
                        assert response.status_code == 200, response.text
                    cells["show_all" if query else "downloaded"] = round(
                        statistics.median(times) * 1000, 2
                    )
                cells["listed"] = len(response.json()["data"])
                out[str(n)] = cells
    return out


def decision_time(sizes: list[int], reps: int) -> dict[str, dict[str, float]]:
    from lemoncore.hosts import HostDevice, HostInfo
    from lemoncore.installs.backends import BackendState, BackendStatus
    from lemoncore.recipes import (
        Backend,
        Device,
        DeviceKind,
        ModelInfo,
        ModelType,
        Recipe,
        SlotPolicy,
        SupportRow,
    )
    from lemoncore.serving.eviction import Incoming, Resident, decide
    from lemoncore.serving.planner import Facts, plan

    host = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),))
    row = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})
    recipe = Recipe(name="r", display_name="R", backends=(Backend(name="b", support=(row,)),))
    model = ModelInfo(name="new", recipe="r", checkpoint="o/r:m.gguf")

    class Hooks:
        def effective_device(self, *_: Any) -> Device:
            return Device.CPU

        def effective_is_amd_gpu(self, *_: Any) -> bool:
            return False

        def slot_policy(self, *_: Any) -> SlotPolicy:
            return SlotPolicy.STANDARD

    out: dict[str, dict[str, float]] = {}
    for n in sizes:
        residents = [
            Resident(
                f"m{i}",
                ModelType.LLM,
                Device.CPU,
                False,
                SlotPolicy.STANDARD,
                False,
                i % 3 == 0,
                float(i),
            )
            for i in range(n)
        ]
        facts = Facts(
            model,
            recipe,
            {},
            {},
            "saved.json",
            [BackendStatus("r", recipe.backends[0], BackendState.INSTALLED)],
            residents,
            None,
            None,
            n,
        )  # full: the load must evict one
        incoming = Incoming("new", ModelType.LLM, Device.CPU, False, SlotPolicy.STANDARD, False)
        out[str(n)] = {
            "plan_us": round(timed(reps, plan, facts, None, Hooks(), host) * 1e6, 1),
            "decide_us": round(timed(reps, decide, residents, incoming, n) * 1e6, 1),
        }
    return out


def growth(cells: dict[str, dict[str, float]], key: str) -> float:
    """Cost per item at the largest size over cost per item at the smallest."""
    sizes = sorted(int(n) for n in cells)
    small, large = sizes[0], sizes[-1]
    return round((cells[str(large)][key] / large) / (cells[str(small)][key] / small), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    catalogue = [10, 100] if args.smoke else [100, 1000, 10000]
    fleet = [1, 16] if args.smoke else [1, 4, 16, 64, 256]
    models = asyncio.run(models_latency(catalogue, 3 if args.smoke else 20))
    decisions = decision_time(fleet, 20 if args.smoke else 2000)
    result = {"models_ms": models, "decision_us": decisions}
    lines = [
        "| catalogue models | GET /v1/models ms (downloaded) | ?show_all=true ms |",
        "|---|---|---|",
    ]
    lines += [f"| {n} | {c['downloaded']} | {c['show_all']} |" for n, c in models.items()]
    lines += [
        f"| growth per model, {catalogue[0]}→{catalogue[-1]} | "
        f"{growth(models, 'downloaded')} | {growth(models, 'show_all')} |",
        "",
        "| loaded servers | plan µs | eviction decide µs |",
        "|---|---|---|",
    ]
    lines += [f"| {n} | {c['plan_us']} | {c['decide_us']} |" for n, c in decisions.items()]
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = "smoke" if args.smoke else time.strftime("%Y%m%d-%H%M%S")
    (args.out / f"scale-{stamp}.json").write_text(json.dumps(result, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
