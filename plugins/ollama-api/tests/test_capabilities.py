"""``/api/show``'s capabilities and ``/api/ps``'s ``expires_at`` as Ollama decides them
(ollama/ollama ``server/images.go``, ``server/sched.go``), over plain data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lemoncore.plugin import GgufArray, LoadedModel, ModelInfo

from lemon_plugin_ollama_api.capabilities import (
    capabilities,
    template_has_thinking,
)
from lemon_plugin_ollama_api.manage import FOREVER, expires_at

CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}{% endfor %}"
TOOLS = "{% if tools %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endif %}"
THINKS = "{{ '<think>' }}{{ m.reasoning }}{{ '</think>' }}"


def model(*labels: str) -> ModelInfo:
    return ModelInfo(name="m", recipe="llamacpp", checkpoint="o/r:m.gguf", labels=labels)


def gguf(template: str = "", **more: Any) -> dict[str, Any]:
    return {
        "general.architecture": "qwen3",
        "tokenizer.ggml.tokens": GgufArray(8, 3),
        **({"tokenizer.chat_template": template} if template else {}),
        **more,
    }


@pytest.mark.parametrize(
    ("labels", "metadata", "expected"),
    [
        (("chat",), gguf(CHATML), ["completion"]),
        (("chat",), gguf(CHATML + TOOLS), ["completion", "tools"]),
        (("chat",), gguf("{{ message.tool_calls }}"), ["completion", "tools"]),
        (("chat",), gguf(THINKS), ["completion", "thinking"]),
        (("reasoning",), gguf(CHATML), ["completion", "thinking"]),
        (
            ("chat",),
            gguf(CHATML, **{"qwen3.vision.block_count": 24}),
            ["completion"],  # no vision label: lemoncore refuses its images
        ),
        (
            ("vision", "reasoning"),
            gguf(CHATML + TOOLS),
            ["completion", "vision", "tools", "thinking"],
        ),
        # the template decides tools once there is one to read; a label only without it
        (("tool-calling",), gguf(CHATML), ["completion"]),
        (("tool-calling",), {}, ["completion", "tools"]),
        (("tools", "vision"), {}, ["completion", "vision", "tools"]),
        (("chat",), {}, ["completion"]),
        (("embeddings",), gguf(CHATML + TOOLS), ["embedding"]),
        (("reranking",), gguf(CHATML), []),
    ],
)
def test_capabilities(
    labels: tuple[str, ...],
    metadata: dict[str, Any],
    expected: list[str],
) -> None:
    assert capabilities(model(*labels), metadata) == expected


@pytest.mark.parametrize(
    ("template", "thinks"),
    [
        ("<think>{{ r }}</think>", True),
        ("{% set c = content.split('</think>')[-1] %}", True),
        ('{% set c = content.split("</think>")[-1] %}', True),
        ("{% set c = content.split('</think>') %}{{ reasoning_content }}", False),
        ("<think>", False),
        (CHATML, False),
    ],
)
def test_thinking_as_ollama_reads_a_template(template: str, thinks: bool) -> None:
    assert template_has_thinking(template) is thinks


def loaded(**fields: Any) -> LoadedModel:
    return LoadedModel.model_construct(
        **{"pinned": False, "idle_seconds": 0.0, "keep_alive": None, **fields}
    )


NOW = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        (loaded(idle_seconds=30.0), NOW - timedelta(seconds=30) + FOREVER),  # forever
        (loaded(idle_seconds=30.0, keep_alive=300.0), NOW + timedelta(seconds=270)),
        (
            loaded(idle_seconds=5.0, keep_alive=60.0, pinned=True),
            NOW - timedelta(seconds=5) + FOREVER,
        ),
        (loaded(keep_alive=60.0), NOW + timedelta(seconds=60)),  # busy: from now
    ],
)
def test_expires_at(server: LoadedModel, expected: datetime) -> None:
    assert expires_at(server, NOW) == expected


def test_forever_is_gos_longest_duration_ahead() -> None:
    """Go's time.Duration(math.MaxInt64) is 292 years and 3 months: Ollama's expires_at
    for a model kept forever, which its CLI shows as "Forever" (more than 20 years)."""
    assert FOREVER == timedelta(microseconds=9_223_372_036_854_775)
    assert (NOW + FOREVER).isoformat().startswith("2319-03-")
