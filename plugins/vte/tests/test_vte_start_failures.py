"""A failed VTE start, judged by VTE's own (Portuguese) words as lemoncore reads them: a start
VTE refuses is hopeless, so it evicts nothing and is not started again; a want of VRAM
may be helped by evicting. Each message is VTE 0.3.7's, as its source writes it."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from lemoncore.exits import StartFailure, classify, start_failure

from lemon_plugin_vte.launch import HOPELESS, OUT_OF_MEMORY

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from vte_support import World, chat

E = StartFailure
FAILED = "2026-12-01 10:00:00,000 [ERROR] VTE.Server: Falha ao carregar o modelo, encerrando: "
W7600, IGPU = "AMD Radeon PRO W7600", "AMD Radeon(TM) 780M Graphics"


@pytest.mark.parametrize(
    # cp1252: a frozen VTE on a pipe in Portuguese or English Windows; cp936: one whose code
    # page lacks the letters ("?"); utf-8: a bundle built with X utf8.
    "encoding",
    ["cp1252", "cp936", "utf-8"],
)
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (  # hip_runtime.py _select_device_index L384
            FAILED + "VTE_TARGET_ARCH_FAMILY=gfx110X, mas o único device HIP visível ('AMD "
            "Radeon PRO W7600', arch desconhecida) não pertence a essa família.",
            E.HOPELESS,
        ),
        (  # L407
            FAILED + "VTE_TARGET_ARCH_FAMILY=gfx110X, mas nenhum dos 2 devices HIP visíveis "
            "pertence a essa família ([...]). Recusando escolher uma geração não validada.",
            E.HOPELESS,
        ),
        (FAILED + "amdhip64.dll não encontrada. Instale o AMD HIP SDK:", E.HOPELESS),  # L215
        # what follows hipInit's line: alone it says nothing of why
        (FAILED + "Operação HIP requer inicialização (chame initialize()).", E.UNKNOWN),
        ("2026-12-01 [ERROR] vte.bridge.hip_runtime: hipInit falhou com código 100", E.HOPELESS),
        (
            "2026-12-01 [ERROR] vte.bridge.hip_runtime: hipSetDevice(3) falhou com código 101",
            E.HOPELESS,
        ),
        (FAILED + "Arquivo GGUF não encontrado: C:\\modelos\\m.gguf", E.HOPELESS),  # model.py
        (FAILED + "Magic number inválido (não é arquivo GGUF)", E.HOPELESS),  # sanitizer.py
        (FAILED + "Versão GGUF não suportada: 2. Somente v3 permitida.", E.HOPELESS),
        (
            FAILED
            + "Arquitetura não suportada: 'mamba'. Suportadas: qwen2, granite, qwen35, llama",
            E.HOPELESS,
        ),
        (FAILED + "Hash não corresponde!", E.HOPELESS),
        (FAILED + "Dtype GGUF não suportado para dequantização: 16", E.HOPELESS),
        ("vte-server: error: argument --port: invalid int value: 'x'", E.HOPELESS),  # argparse
        (  # qwen_mapper.py format_oom_error L26
            FAILED + "OOM Preventivo: 'Qwen2.5-7B' precisa de 9.10GB (context_length=8192)",
            E.OUT_OF_MEMORY,
        ),
        (FAILED + "hipMalloc falhou com OOM. Acionando Memory Guardian", E.OUT_OF_MEMORY),
    ],
)
def test_vtes_words_decide_a_failed_start(line: str, expected: E, encoding: str) -> None:
    """VTE writes ``line`` in ``encoding`` (``SafeStreamHandler``: "?" for what it lacks);
    lemoncore reads it as UTF-8 (U+FFFD for what does not decode)."""
    read = line.encode(encoding, errors="replace").decode("utf-8", errors="replace")
    assert start_failure(classify(1, [read]), [read], OUT_OF_MEMORY, HOPELESS) is expected


@pytest.mark.anyio
@pytest.mark.parametrize("hip", [[W7600], [W7600, IGPU]])
async def test_a_start_vte_refuses_evicts_nothing_and_runs_once(
    world: World, hip: list[str]
) -> None:
    """lemoncore sees an RX 7600; HIP shows VTE a card outside its family, and VTE refuses it
    (writing cp1252, as its release does). The CPU model stays, and a second request is
    answered from the first failure instead of starting VTE again."""
    async with world.lemon(hip=hip, max_loaded_models=2) as client:
        cpu = await client.post("/api/v1/load", json={"model_name": "cpu-smol"})
        assert cpu.status_code == 200, cpu.text
        before = (await client.get("/api/v1/health")).json()["all_models_loaded"]
        replies: list[httpx.Response] = []
        for _ in range(2):
            replies.append(await client.post("/v1/chat/completions", json=chat()))
        after = (await client.get("/api/v1/health")).json()["all_models_loaded"]
    assert [r.status_code for r in replies] == [503, 503]
    assert "starting it again cannot help" in replies[0].json()["error"]["message"]
    assert [(m["model_name"], m["pid"]) for m in after] == [
        (m["model_name"], m["pid"]) for m in before
    ]
    vte_starts = [s for s in world.reports("start") if "--parent-pid" in s["argv"]]
    assert len(vte_starts) == 1  # the CPU model's engine is the stand-in too, without it
