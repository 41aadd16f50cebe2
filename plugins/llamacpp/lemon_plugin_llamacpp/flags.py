"""The llama-server flags a request may pass in ``llamacpp_args``: tuning knobs that take
a number or a word from a fixed set, never a path, URL, host or template.

Spellings follow llama.cpp's ``common/arg.cpp`` (checked against ``llama-server --help``
of the pinned build by ``tests/test_args_allow_list.py``). Everything else is refused, including
every flag that takes a file (``--log-file``, ``--lora``, ``--chat-template-file``,
``--grammar-file``, ``--slot-save-path``, ``--mmproj``, ``--model-draft``,
``--control-vector``, ...); an administrator can allow more with
``recipes.llamacpp.llamacpp_args_allow``.
"""

from __future__ import annotations

from lemoncore.plugin import ArgFlag

CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def _int(*names: str, words: tuple[str, ...] = ()) -> ArgFlag:
    return ArgFlag(names=names, takes="int", choices=words)


def _float(*names: str) -> ArgFlag:
    return ArgFlag(names=names, takes="float")


def _switch(*names: str) -> ArgFlag:
    return ArgFlag(names=names)


def _choice(*names: str, words: tuple[str, ...]) -> ArgFlag:
    return ArgFlag(names=names, takes="choice", choices=words)


TUNING_FLAGS: tuple[ArgFlag, ...] = (
    # Threads, batching, slots
    _int("-t", "--threads"),
    _int("-tb", "--threads-batch"),
    _int("--threads-http"),
    _int("-b", "--batch-size"),
    _int("-ub", "--ubatch-size"),
    _int("-np", "--parallel"),
    _switch("-cb", "--cont-batching"),
    _switch("-nocb", "--no-cont-batching"),
    _int("--prio"),
    _int("--poll"),
    _int("--cache-reuse"),
    _int("-to", "--timeout"),
    _int("-n", "--n-predict", "--predict"),
    _int("--keep"),
    _int("-lv", "--verbosity", "--log-verbosity"),  # 4: device placement, per-slot lines
    # Offload and memory
    _int("-ngl", "--gpu-layers", "--n-gpu-layers", words=("auto", "all")),
    _choice("-sm", "--split-mode", words=("none", "layer", "row", "tensor")),
    _int("-mg", "--main-gpu"),
    ArgFlag(names=("-ts", "--tensor-split"), takes="floats"),
    ArgFlag(names=("-dev", "--device"), takes="names"),
    _choice("-fa", "--flash-attn", words=("on", "off", "auto")),
    _choice("-ctk", "--cache-type-k", words=CACHE_TYPES),
    _choice("-ctv", "--cache-type-v", words=CACHE_TYPES),
    _switch("-kvo", "--kv-offload"),
    _switch("-nkvo", "--no-kv-offload"),
    _choice("-lm", "--load-mode", words=("auto", "none", "mmap", "mlock", "mmap+mlock")),
    _choice("--numa", words=("distribute", "isolate", "numactl")),
    # Weight repacking; off avoids the AMX kernels that die of SIGILL (llama.cpp PR #26954)
    _switch("-nr", "--no-repack"),
    _switch("-cmoe", "--cpu-moe"),
    _int("-ncmoe", "--n-cpu-moe"),
    _switch("--warmup"),
    _switch("--no-warmup"),
    _switch("--swa-full"),
    _switch("-kvu", "--kv-unified"),
    _switch("-no-kvu", "--no-kv-unified"),
    _switch("--no-context-shift"),
    _switch("--context-shift"),
    # Context extension
    _choice("--rope-scaling", words=("none", "linear", "yarn")),
    _float("--rope-scale"),
    _float("--rope-freq-base"),
    _float("--rope-freq-scale"),
    _int("--yarn-orig-ctx"),
    # Sampling defaults
    _int("-s", "--seed"),
    _float("--temp"),
    _int("--top-k"),
    _float("--top-p"),
    _float("--min-p"),
    _float("--typical"),
    _float("--repeat-penalty"),
    _int("--repeat-last-n"),
    _float("--presence-penalty"),
    _float("--frequency-penalty"),
    _float("--dry-multiplier"),
    _float("--dry-base"),
    _int("--dry-allowed-length"),
    _int("--dry-penalty-last-n"),
    _float("--xtc-probability"),
    _float("--xtc-threshold"),
    _float("--dynatemp-range"),
    _float("--dynatemp-exp"),
    _int("--mirostat"),
    _float("--mirostat-lr"),
    _float("--mirostat-ent"),
    _switch("--ignore-eos"),
    # Reasoning models
    _choice("-rea", "--reasoning", words=("on", "off", "auto")),
    _choice("--reasoning-format", words=("none", "deepseek", "deepseek-legacy", "auto")),
    _int("--reasoning-budget"),
    # Embeddings
    _choice("--pooling", words=("none", "mean", "cls", "last", "rank")),
)
