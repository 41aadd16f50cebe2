"""llama.cpp's real messages for a failed start, as its plugin declares them: a want of
memory evicts and retries, wrong input never retries (``lemoncore.exits.start_failure``).
The lines are llama-server's (build 11434, run here by hand; ``tests/tinyserver.py``)."""

from __future__ import annotations

import pytest

from lemoncore.exits import StartFailure, classify, start_failure

from lemon_plugin_llamacpp.launch import HOPELESS, OUT_OF_MEMORY

E = StartFailure


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            [
                "ggml_aligned_malloc: insufficient memory (attempted to allocate 180.00 MB)",
                "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size "
                "188743680",
                "llama_init_from_model: failed to initialize the context: failed to allocate "
                "buffer for kv cache",
            ],
            E.OUT_OF_MEMORY,
        ),
        (
            ["ggml_backend_buft_alloc_buffer_n_default: failed to allocate CPU buffer of size 9"],
            E.OUT_OF_MEMORY,
        ),
        (
            ["llama_model_load: error loading model: unable to allocate CUDA0 buffer"],
            E.OUT_OF_MEMORY,
        ),
        (
            [
                "gguf_init_from_file: failed to open GGUF file '/x.gguf' (No such file or "
                "directory)",
                "srv    load_model: failed to load model, '/x.gguf'",
            ],
            E.HOPELESS,
        ),
        (["error: invalid argument: --bogus-flag"], E.HOPELESS),
        (
            [
                "llama_model_load: error loading model: tensor 'blk.0.attn_q.weight' data is not "
                "within the file bounds, model is corrupted or incomplete"
            ],
            E.HOPELESS,
        ),
        (["srv  llama_server: exiting due to model loading error"], E.UNKNOWN),
    ],
)
def test_llama_cpps_words_decide_a_failed_start(lines: list[str], expected: E) -> None:
    assert start_failure(classify(1, lines), lines, OUT_OF_MEMORY, HOPELESS) is expected
