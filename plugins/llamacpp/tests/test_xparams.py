"""``llamacpp:prebuilt``'s command line: llama-server's flags mapped onto xllamacpp's
CommonParams settings by :mod:`lemon_plugin_llamacpp.xparams`, checked value by value
against what llama.cpp's ``common/arg.cpp`` does (conversions, server defaults, refusals,
C number parsing), as pure data: xparams never imports xllamacpp."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lemoncore.plugin import ArgFlag

from .xparams_support import BASE, samples
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


def user_settings(*argv: str, hw: int = 4) -> list[Setting]:
    """The settings ``argv`` adds, without the server defaults and post-processing."""
    return parse(["-m", "m.gguf", *argv], hardware_concurrency=hw)[2:-1]


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
    (["--mmproj", "/m/mmproj.gguf"], [Setting("mmproj.path", "/m/mmproj.gguf")]),
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
