"""VTE's Portuguese messages for a failed start (VTE 0.3.7, /work/shared/reference/vte.md),
as its plugin declares them: its family refusal never evicts nor retries."""

from __future__ import annotations

import pytest

from lemoncore.exits import StartFailure, classify, start_failure

from lemon_plugin_vte.launch import HOPELESS, OUT_OF_MEMORY

E = StartFailure
FAILED = "Falha ao carregar o modelo, encerrando: "


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            FAILED + "VTE_TARGET_ARCH_FAMILY=gfx11, mas o único device HIP visível ('AMD Radeon "
            "RX 9070', arch gfx1201) não pertence a essa família.",
            E.HOPELESS,
        ),
        (
            FAILED + "VTE_TARGET_ARCH_FAMILY=gfx11, mas nenhum dos 2 devices HIP visíveis pertence "
            "a essa família ([...]). Recusando escolher uma geração não validada.",
            E.HOPELESS,
        ),
        (FAILED + "amdhip64.dll não encontrada. Instale o AMD HIP SDK: https://x", E.HOPELESS),
        (FAILED + "Arquivo GGUF não encontrado: C:\\m.gguf", E.HOPELESS),
        (
            FAILED
            + "Arquitetura não suportada: 'mamba'. Suportadas: qwen2, granite, qwen35, llama",
            E.HOPELESS,
        ),
        (
            FAILED + "VRAM livre atual (3%) está abaixo do limite configurado (--vram-limit-pct "
            "10%). Recusando carregar",
            E.OUT_OF_MEMORY,
        ),
        (FAILED + "OOM Preventivo: 'qwen' precisa de 9.1GB (context_length=8192)", E.OUT_OF_MEMORY),
        ("hipInit falhou com código 100", E.UNKNOWN),
    ],
)
def test_vtes_words_decide_a_failed_start(line: str, expected: E) -> None:
    assert start_failure(classify(1, [line]), [line], OUT_OF_MEMORY, HOPELESS) is expected
