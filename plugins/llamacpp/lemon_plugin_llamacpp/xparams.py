"""llama-server's command line as ``xllamacpp.CommonParams`` settings (``llamacpp:prebuilt``).

Pure (no xllamacpp import: lemoncore checks command lines with ``unsupported_flags`` without
loading a native extension that may die of SIGILL). The table holds every flag
``launch.build_launch`` passes and every flag of ``flags.TUNING_FLAGS``, in all llama.cpp's
spellings, converted as the ``add_opt`` blocks of ``common/arg.cpp`` do (llama.cpp of the
xllamacpp 2026.10.11549 sdist, ``thirdparty/llama.cpp``; lines cited), int handlers getting
``std::stoi(value)`` from ``common_params_parse_ex``.
"""

from __future__ import annotations

import math
import os
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NoReturn, TypeAlias


@dataclass(frozen=True)
class EnumValue:
    """A member of an xllamacpp enum, by name: ``EnumValue("ggml_type", "GGML_TYPE_Q8_0")``."""

    enum: str
    name: str


Value: TypeAlias = bool | int | float | str | EnumValue | tuple[str, ...] | tuple[float, ...]
Op = Literal["set", "or", "max", "extend", "join", "update", "splice"]


@dataclass(frozen=True)
class Setting:
    """An assignment to a ``CommonParams`` attribute path (``sampling.top_k``). ``op``: ``set``;
    ``or`` an int bit flag in; ``max``: keep the larger; ``extend`` a list or set with the
    tuple's items; ``join`` onto a comma-separated string; ``update`` a dict with ``(key,
    value)``; ``splice``: replace the first ``len(value)`` items of a list."""

    path: str
    value: Value
    op: Op = "set"


class ArgumentError(ValueError):
    """A command line llama-server refuses, or one this backend cannot apply; ``str()`` is
    the one-line message, in llama.cpp's words where it has them."""


Convert = Callable[[str], tuple[Setting, ...]]


@dataclass(frozen=True)
class FlagSpec:
    names: tuple[str, ...]
    convert: Convert  # called with the value ("" for a switch)
    takes_value: bool = True


S = Setting
INT_MIN, INT_MAX, ULONG_MAX = -(2**31), 2**31 - 1, 2**64 - 1
FLT_MIN = 2.0**-126  # the smallest normal float
LLAMA_MAX_DEVICES = 16  # src/llama.cpp llama_max_devices()
# common/common.h LLM_FFN_EXPS_REGEX. "CPU" names ggml_backend_cpu_buffer_type(), the key
# xllamacpp's parse_tensor_buffer_overrides (src/xllamacpp/server.cpp) finds it by.
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
PRIORITIES = {-1: "LOW", 0: "NORMAL", 1: "MEDIUM", 2: "HIGH", 3: "REALTIME"}  # ggml_sched_priority
# common/arg.cpp common_arg_utils::is_truthy, is_falsey, is_autoy
TRUTHY, FALSEY, AUTOY = ("on", "enabled", "true", "1"), ("off", "disabled", "false", "0"), (
    "auto", "-1")  # fmt: skip
_INT = re.compile(r"\s*([+-]?\d+)")
_NUM = r"0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?\d+)?|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?"
_FLOAT = re.compile(rf"\s*([+-]?(?:{_NUM}|inf(?:inity)?|nan))", re.IGNORECASE)


def _refuse(message: str) -> NoReturn:
    raise ValueError(message)


def _c_int(text: str, name: str, low: int, high: int) -> int:
    if (m := _INT.match(text)) is None:
        raise ValueError(f"{name}: no number in '{text}'")
    if not low <= (value := int(m.group(1))) <= high:
        raise ValueError(f"{name}: '{text}' is out of range")
    return value


def stoi(text: str) -> int:
    """``std::stoi``: leading space, a sign, base-10 digits; what follows is ignored."""
    return _c_int(text, "stoi", INT_MIN, INT_MAX)


def stoul_u32(text: str) -> int:
    """``std::stoul`` stored in a ``uint32_t``: strtoul negates in unsigned arithmetic
    (``-1`` is 2**64-1), then the assignment keeps the low 32 bits."""
    return _c_int(text, "stoul", -ULONG_MAX, ULONG_MAX) % 2**64 % 2**32


def f32(value: float) -> float:
    """``value`` rounded to a C ``float``, as the float fields of common_params hold it."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:  # rounds to infinity
        return math.copysign(math.inf, value)


def stof(text: str) -> float:
    """``std::stof``: strtof's syntax (decimal, hex, inf, nan); out of range on ERANGE."""
    if (m := _FLOAT.match(text)) is None:
        raise ValueError(f"stof: no number in '{text}'")
    token = m.group(1)
    value = float.fromhex(token) if "x" in token.lower() else float(token)
    if (math.isinf(result := f32(value)) and not math.isinf(value)) or (
        value and abs(result) < FLT_MIN
    ):
        raise ValueError(f"stof: '{text}' is out of range")
    return result


def parse_csv_row(text: str) -> list[str]:
    """common/arg.cpp ``parse_csv_row``: comma-separated, ``"`` quotes, ``""`` escapes."""
    fields, field, quoted, i = list[str](), "", False, 0
    while i < len(text):
        ch, i = text[i], i + 1
        if ch == '"' and quoted and text[i : i + 1] == '"':
            field, i = field + ch, i + 1  # "" in quotes
        elif ch == '"' and (quoted or not field):  # a quote inside a bare field is a quote
            quoted = not quoted
        elif ch == "," and not quoted:
            fields, field = [*fields, field], ""
        else:
            field += ch
    return [*fields, field]


def _bit(name: str) -> Setting:  # common.cpp common_init_sampler_from_model keeps user values
    config = EnumValue("common_params_sampling_config", f"COMMON_PARAMS_SAMPLING_CONFIG_{name}")
    return S("sampling.user_sampling_config", config, "or")


def _int(*paths: str, ok: Callable[[int], bool] = lambda _: True, what: str = "invalid value",
         then: tuple[Setting, ...] = ()) -> Convert:  # fmt: skip
    """A handler_int storing the number in ``paths``; ``what`` refuses one not ``ok``."""
    return lambda v: (*(S(p, n) for p in paths), *then) if ok(n := stoi(v)) else _refuse(
        what.format(n))  # fmt: skip


def _float(path: str, *then: Setting, finite: str = "") -> Convert:
    """A string handler storing ``std::stof(value)``; ``finite``: the message refusing
    inf and nan."""
    return lambda v: (S(path, x), *then) if math.isfinite(x := stof(v)) or not finite else (
        _refuse(finite))  # fmt: skip


def _const(*settings: Setting) -> Convert:
    return lambda _: settings


def _words(path: str, enum: str, prefix: str, words: Sequence[str], what: str = "invalid value",
           special: Mapping[str, str] | None = None) -> Convert:  # fmt: skip
    """One of ``words``, naming ``prefix`` + the word in capitals (``-``/``+`` as ``_``),
    or of ``special`` (word -> member)."""
    names = {w: prefix + re.sub("[-+]", "_", w.upper()) for w in words} | dict(special or {})
    return lambda v: (S(path, EnumValue(enum, names[v])),) if v in names else _refuse(
        what.format(v))  # fmt: skip


def _switch(pos: tuple[str, ...], neg: tuple[str, ...], path: str, invert: bool = False
            ) -> list[FlagSpec]:  # fmt: skip
    """A handler_bool: ``pos`` spellings pass true, ``neg`` ones false."""
    return [FlagSpec(pos, _const(S(path, not invert)), False),
            FlagSpec(neg, _const(S(path, invert)), False)]  # fmt: skip


def _tensor_split(v: str) -> tuple[Setting, ...]:  # arg.cpp:2843: split on [,/]+
    parts = re.split(r"[,/]+", v)
    if parts[-1] == "":  # std::sregex_token_iterator yields no empty last piece
        parts.pop()
    if len(parts) >= LLAMA_MAX_DEVICES:
        _refuse(f"got {len(parts)} input configs, but system only has {LLAMA_MAX_DEVICES} devices")
    split = [stof(p) for p in parts] + [0.0] * (LLAMA_MAX_DEVICES - len(parts))
    return (S("tensor_split", tuple(split), "splice"),)


def _reasoning(v: str) -> tuple[Setting, ...]:  # arg.cpp:3709
    if v in AUTOY:
        return (S("enable_reasoning", -1),)
    if v not in TRUTHY + FALSEY:
        _refuse(f"unknown value for --reasoning: '{v}'")
    thinking = ("enable_thinking", "true" if v in TRUTHY else "false")
    return S("enable_reasoning", int(v in TRUTHY)), S("default_template_kwargs", thinking, "update")


TRI = ((TRUTHY, "ENABLED"), (FALSEY, "DISABLED"), (AUTOY, "AUTO"))
RANK = EnumValue("llama_pooling_type", "LLAMA_POOLING_TYPE_RANK")
SAMPLING_FLOATS = (  # arg.cpp:2034-2247: (spellings, sampling field, user-config bit or "")
    (("--top-p",), "top_p", "TOP_P"), (("--min-p",), "min_p", "MIN_P"),
    (("--typical", "--typical-p"), "typ_p", ""), (("--dry-multiplier",), "dry_multiplier", ""),
    (("--xtc-probability",), "xtc_probability", "XTC_PROBABILITY"),
    (("--xtc-threshold",), "xtc_threshold", "XTC_THRESHOLD"),
    (("--dynatemp-range",), "dynatemp_range", ""), (("--dynatemp-exp",), "dynatemp_exponent", ""),
    (("--mirostat-lr",), "mirostat_eta", "MIROSTAT_ETA"),
    (("--mirostat-ent",), "mirostat_tau", "MIROSTAT_TAU"),
)  # fmt: skip


def _table(hw: int) -> dict[str, FlagSpec]:
    """Every spelling -> its spec; ``hw``: what std::thread::hardware_concurrency() says."""
    # fmt: off
    specs = [
        # lemoncore's own flags (launch.build_launch)
        FlagSpec(("-m", "--model"), lambda v: (S("model.path", v),)),  # arg.cpp:3047
        FlagSpec(("-mm", "--mmproj"), lambda v: (S("mmproj.path", v),)),  # arg.cpp:2581
        FlagSpec(("--port",), _int("port")),
        FlagSpec(("--host",), lambda v: (S("hostnames", hosts),) if (  # arg.cpp:3333
            hosts := tuple(h.strip() for h in parse_csv_row(v) if h.strip())
        ) else _refuse("--host requires at least one address")),
        # arg.cpp:1641: -c 0 sets fit_params_min_ctx = UINT32_MAX, -1 in its int32_t field
        FlagSpec(("-c", "--ctx-size"), lambda v: (S("n_ctx", n),) if (n := stoi(v)) else (
            S("n_ctx", 0), S("fit_params_min_ctx", -1))),
        FlagSpec(("-a", "--alias"), lambda v: (S("model_alias", tuple(  # arg.cpp:3023
            a.strip() for a in v.split(",") if a.strip()), "extend"),)),
        *_switch(("--jinja",), ("--no-jinja",), "use_jinja"),  # arg.cpp:3690
        FlagSpec(("--metrics",), _const(S("endpoint_metrics", True)), False),  # arg.cpp:3611
        FlagSpec(("--embedding", "--embeddings"), _const(S("embedding", True)), False),
        FlagSpec(("--rerank", "--reranking"),  # arg.cpp:3503
                 _const(S("embedding", True), S("pooling_type", RANK)), False),
        # threads, batching, slots; arg.cpp:1519, 1529: -t/-tb <= 0 mean hardware_concurrency()
        FlagSpec(("-t", "--threads"), lambda v: (
            S("cpuparams.n_threads", n if (n := stoi(v)) > 0 else hw),)),
        FlagSpec(("-tb", "--threads-batch"), lambda v: (
            S("cpuparams_batch.n_threads", n if (n := stoi(v)) > 0 else hw),)),
        FlagSpec(("--threads-http",), _int("n_threads_http")),
        FlagSpec(("-b", "--batch-size"), _int("n_batch")),
        FlagSpec(("-ub", "--ubatch-size"), _int("n_ubatch")),
        FlagSpec(("-np", "--parallel"), _int(  # arg.cpp:2546, the LLAMA_EXAMPLE_SERVER one
            "n_parallel", ok=lambda n: n != 0, what="invalid value for n_parallel")),
        *_switch(("-cb", "--cont-batching"), ("-nocb", "--no-cont-batching"), "cont_batching"),
        FlagSpec(("--prio",), lambda v: (S("cpuparams.priority", EnumValue(  # arg.cpp:1566
            "ggml_sched_priority", f"GGML_SCHED_PRIO_{PRIORITIES[n]}")),) if (
                n := stoi(v)) in PRIORITIES else _refuse("invalid value")),
        FlagSpec(("--poll",), lambda v: (S("cpuparams.poll", stoul_u32(v)),)),  # arg.cpp:1576
        FlagSpec(("--cache-reuse",), _int("n_cache_reuse")),
        FlagSpec(("-to", "--timeout"), _int("timeout_read", "timeout_write")),  # arg.cpp:3571
        FlagSpec(("-n", "--predict", "--n-predict"), _int("n_predict")),
        FlagSpec(("--keep",), _int("n_keep")),
        FlagSpec(("-lv", "--verbosity", "--log-verbosity"), _int("verbosity")),
        # offload and memory
        FlagSpec(("-ngl", "--gpu-layers", "--n-gpu-layers"), lambda v: (  # arg.cpp:2801
            S("n_gpu_layers", -1 if v == "auto" else -2 if v == "all" else stoi(v)),)),
        FlagSpec(("-sm", "--split-mode"), _words("split_mode", "llama_split_mode",
                 "LLAMA_SPLIT_MODE_", ("none", "layer", "row", "tensor"))),
        FlagSpec(("-mg", "--main-gpu"), _int("main_gpu")),
        FlagSpec(("-ts", "--tensor-split"), _tensor_split),
        FlagSpec(("-fa", "--flash-attn"), _words(  # arg.cpp:1757
            "flash_attn_type", "llama_flash_attn_type", "", (),
            "unknown value for --flash-attn: '{}'",
            {w: f"LLAMA_FLASH_ATTN_TYPE_{m}" for ws, m in TRI for w in ws})),
        # arg.cpp:2439, 2452, 316 kv_cache_type_from_str
        *(FlagSpec(names, _words(path, "ggml_type", "GGML_TYPE_", KV_CACHE_TYPES,
                                 "Unsupported cache type: {}"))
          for names, path in ((("-ctk", "--cache-type-k"), "cache_type_k"),
                              (("-ctv", "--cache-type-v"), "cache_type_v"))),
        *_switch(("-kvo", "--kv-offload"), ("-nkvo", "--no-kv-offload"), "no_kv_offload", True),
        *_switch(("--repack",), ("-nr", "--no-repack"), "no_extra_bufts", True),  # arg.cpp:2424
        FlagSpec(("-lm", "--load-mode"), _words("load_mode", "llama_load_mode",  # arg.cpp:2693
                 "LLAMA_LOAD_MODE_", ("auto", "none", "mmap", "mlock", "mmap+mlock"),
                 special={"dio": "LLAMA_LOAD_MODE_DIRECT_IO"})),
        # arg.cpp:2725; xllamacpp's init() calls llama_numa_init(params.numa) as llama-server does
        FlagSpec(("--numa",), _words("numa", "ggml_numa_strategy", "GGML_NUMA_STRATEGY_",
                 ("distribute", "isolate", "numactl"),
                 special={"": "GGML_NUMA_STRATEGY_DISTRIBUTE"})),
        FlagSpec(("-cmoe", "--cpu-moe"),  # arg.cpp:2762: llm_ffn_exps_cpu_override()
                 _const(S("tensor_buft_overrides", f"{FFN_EXPS_REGEX}=CPU", "join")), False),
        FlagSpec(("-ncmoe", "--n-cpu-moe"), lambda v: (  # arg.cpp:2769, llm_add_n_cpu_ffn_overrides
            S("tensor_buft_overrides", ",".join(f"blk\\.{i}{FFN_EXPS_REGEX}=CPU" for i in range(n)),
              "join"),) if (n := stoi(v)) > 0 else () if n == 0 else _refuse("invalid value")),
        *_switch(("--warmup",), ("--no-warmup",), "warmup"),
        FlagSpec(("--swa-full",), _const(S("swa_full", True)), False),
        *_switch(("-kvu", "--kv-unified"), ("-no-kvu", "--no-kv-unified"), "kv_unified"),
        *_switch(("--context-shift",), ("--no-context-shift",), "ctx_shift"),
        # context extension (arg.cpp:2336-2373)
        FlagSpec(("--rope-scaling",), _words("rope_scaling_type", "llama_rope_scaling_type",
                 "LLAMA_ROPE_SCALING_TYPE_", ("none", "linear", "yarn"))),
        FlagSpec(("--rope-scale",), lambda v: (S("rope_freq_scale",  # 1.0f / N
            f32(1.0 / x) if (x := stof(v)) else math.copysign(math.inf, x)),)),
        FlagSpec(("--rope-freq-base",), _float("rope_freq_base")),
        FlagSpec(("--rope-freq-scale",), _float("rope_freq_scale")),
        FlagSpec(("--yarn-orig-ctx",), _int("yarn_orig_ctx")),
        # sampling defaults (arg.cpp:1996-2247)
        FlagSpec(("-s", "--seed"), lambda v: (S("sampling.seed", stoul_u32(v)),)),
        FlagSpec(("--temp", "--temperature"), lambda v: (  # arg.cpp:2017: max(temp, 0.0f)
            S("sampling.temp", 0.0 if (x := stof(v)) < 0.0 else x), _bit("TEMP"))),
        FlagSpec(("--top-k",), _int("sampling.top_k", then=(_bit("TOP_K"),))),
        *(FlagSpec(names, _float(f"sampling.{field}", *((_bit(bit),) if bit else ())))
          for names, field, bit in SAMPLING_FLOATS),
        FlagSpec(("--repeat-penalty",), lambda v: (  # arg.cpp:2092
            S("sampling.penalty_repeat", x), _bit("PENALTY_REPEAT")) if math.isfinite(x := stof(v))
            and x > 0.0 and math.isfinite(f32(1.0 / x)) else _refuse(
                "repeat-penalty must be finite and greater than 0")),
        FlagSpec(("--repeat-last-n",), lambda v: (  # arg.cpp:2080: n_prev = max(n_prev, n)
            *_int("sampling.penalty_last_n", ok=lambda n: n >= 0,
                  what="invalid repeat-last-n = {}")(v),
            S("sampling.n_prev", stoi(v), "max"), _bit("PENALTY_LAST_N"))),
        FlagSpec(("--presence-penalty",), _float("sampling.penalty_present",
                 finite="presence-penalty must be finite")),
        FlagSpec(("--frequency-penalty",), _float("sampling.penalty_freq",
                 finite="frequency-penalty must be finite")),
        FlagSpec(("--dry-base",), lambda v: (  # arg.cpp:2135: a base below 1.0 is ignored
            (S("sampling.dry_base", x),) if (x := stof(v)) >= 1.0 else ())),
        FlagSpec(("--dry-allowed-length",), _int("sampling.dry_allowed_length")),
        FlagSpec(("--dry-penalty-last-n",), _int("sampling.dry_penalty_last_n",
                 ok=lambda n: n >= 0, what="invalid dry-penalty-last-n = {}")),
        FlagSpec(("--mirostat",), _int("sampling.mirostat", then=(_bit("MIROSTAT"),))),
        FlagSpec(("--ignore-eos",), _const(S("sampling.ignore_eos", True)), False),
        # reasoning models (arg.cpp:3698-3745; common/chat.cpp common_reasoning_format_from_name)
        FlagSpec(("-rea", "--reasoning"), _reasoning),
        FlagSpec(("--reasoning-format",), _words("reasoning_format", "common_reasoning_format",
                 "COMMON_REASONING_FORMAT_", ("none", "auto", "deepseek", "deepseek-legacy"),
                 "Unknown reasoning format: {}")),
        FlagSpec(("--reasoning-budget",), _int("sampling.reasoning_budget_tokens",
                 ok=lambda n: n >= -1)),
        # embeddings (arg.cpp:2315)
        FlagSpec(("--pooling",), _words("pooling_type", "llama_pooling_type",
                 "LLAMA_POOLING_TYPE_", ("none", "mean", "cls", "last", "rank"))),
    ]
    # fmt: on
    return {name: spec for spec in specs for name in spec.names}


# Flags llama-server takes that CommonParams cannot express, and why.
UNSUPPORTED: Mapping[str, str] = {
    **dict.fromkeys(
        ("-dev", "--device"),
        "xllamacpp's CommonParams has no 'devices' (src/xllamacpp/xllamacpp.pyx has only "
        "speculative.draft.devices and mmproj_device), so common_params::devices stays unset",
    ),
    "--rpc": "common/arg.cpp add_rpc_devices() registers RPC devices in ggml's backend "
    "registry; xllamacpp has no way to do that",
}
PYPI_HINT = "use the llamacpp:pypi backend (llama-server built from source) for it"
# common/arg.cpp common_params_parser_init: llama-server's own default, -np -1 (auto: the
# server makes that 4 slots sharing a unified KV cache); common_params says 1.
SERVER_DEFAULTS = (S("n_parallel", -1),)
_SPELLINGS = _table(1)  # for names and arity; parse() builds one with the real thread count
KNOWN_FLAGS = frozenset(_SPELLINGS)  # every spelling parse() maps onto CommonParams


def _spelling(arg: str) -> str:  # common_params_parse_ex reads "--a_b" as "--a-b"
    return arg.replace("_", "-") if arg.startswith("--") else arg


def unsupported_flags(args: Sequence[str]) -> list[str]:
    """The flags in ``args`` that ``parse`` refuses whatever their values: those of
    ``UNSUPPORTED`` and any other it does not know, in order, each once."""
    found: list[str] = []
    i = 0
    while i < len(args):
        spec = _SPELLINGS.get(arg := _spelling(args[i]))
        if spec is None and arg not in found:
            found.append(arg)
        i += 2 if spec is not None and spec.takes_value else 1
        if spec is None and i < len(args) and not args[i].startswith("-"):
            i += 1  # most likely the unknown flag's value
    return found


def parse(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
          hardware_concurrency: int | None = None) -> list[Setting]:  # fmt: skip
    """What llama-server's parser makes of ``argv`` (no program name) and of
    ``LLAMA_API_KEY`` in ``env``, as settings for a fresh CommonParams, in order:
    llama-server's defaults, each flag, the parser's post-processing. ``ArgumentError`` for
    a command line llama-server refuses or one this backend cannot apply."""
    # std::thread::hardware_concurrency() counts the online CPUs, as os.cpu_count() does
    table = _table(hardware_concurrency or os.cpu_count() or 1)
    settings = list(SERVER_DEFAULTS)
    # arg.cpp:3511: --api-key's set_env("LLAMA_API_KEY"), applied before the command line
    if keys := tuple(k for k in parse_csv_row((env or {}).get("LLAMA_API_KEY", "")) if k):
        settings.append(S("api_keys", keys, "extend"))
    i = 0
    while i < len(argv):
        if (spec := table.get(arg := _spelling(argv[i]))) is None:
            if arg in UNSUPPORTED:
                why = f"{UNSUPPORTED[arg]}; {PYPI_HINT}"
                raise ArgumentError(f"error: {arg} is not supported by llamacpp:prebuilt: {why}")
            raise ArgumentError(f"error: invalid argument: {arg}")
        if spec.takes_value and i + 1 >= len(argv):
            raise ArgumentError(f'error while handling argument "{arg}": expected value')
        try:
            settings += spec.convert(argv[i + 1] if spec.takes_value else "")
        except ValueError as exc:
            raise ArgumentError(f'error while handling argument "{arg}": {exc}') from exc
        i += 2 if spec.takes_value else 1
    # common_params_parse_ex ends with preserve_reasoning = "true" unless a flag set it
    # (--reasoning-preserve, which the table does not take)
    settings.append(S("default_template_kwargs", ("preserve_reasoning", "true"), "update"))
    return settings
