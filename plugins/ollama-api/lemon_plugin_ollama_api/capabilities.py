"""What a model can do, as Ollama's ``/api/show`` lists it in ``capabilities``.

Ollama's own rules (ollama/ollama ``server/images.go`` ``Model.capabilitiesForTemplate``;
the names are ``types/model/capability.go``'s), in its order for a model with a Go
template (``ggufCapabilities``, then ``templateCapabilities``): ``completion``, or
``embedding`` for an embedding model, then ``vision`` (the GGUF's
``<arch>.vision.block_count``, or a projector), then what the chat template handles:
``tools`` when it mentions ``tools`` or ``tool_call`` (``chatTemplateHasToolSupport``),
``thinking`` when it has ``<think>`` and ``</think>`` (``chatTemplateHasThinkingSupport``).

lemoncore's facts take precedence where it has better ones. The kind is lemoncore's
model type (what its routes serve the model as: an ``embeddings`` label makes it
``embedding``); ``vision`` only with a ``vision`` label, the one lemoncore sends images
to (not from the GGUF: lemoncore loads no projector); a ``reasoning`` label adds
``thinking``. A model that is not downloaded has no template to read: its labels alone
say (``tools``/``tool-calling``, ``vision``, ``reasoning``). Other model types
(reranking, transcription, images...) have no Ollama capability the plugin serves: ``[]``.
"""

from __future__ import annotations

from collections.abc import Mapping

from lemoncore.plugin import GgufArray, GgufValue, ModelInfo, ModelType

_TOOL_LABELS = frozenset({"tools", "tool-calling"})


def template_has_tools(template: str) -> bool:
    """Ollama's ``chatTemplateHasToolSupport``."""
    return "tools" in template or "tool_call" in template


def template_has_thinking(template: str) -> bool:
    """Ollama's ``chatTemplateHasThinkingSupport``."""
    if "<think>" in template and "</think>" in template:
        return True
    return (
        ("content.split('</think>')" in template or 'content.split("</think>")' in template)
        and "reasoning_content" not in template
        and "<SPECIAL_12>" not in template
    )


def capabilities(model: ModelInfo, metadata: Mapping[str, GgufValue | GgufArray]) -> list[str]:
    """``model``'s capabilities, in Ollama's order, from its GGUF ``metadata`` (``{}``
    when not downloaded; see the module's docstring)."""
    if model.model_type is ModelType.EMBEDDING:
        return ["embedding"]
    if model.model_type is not ModelType.LLM:
        return []
    labels = set(model.labels)
    template = _text(metadata, "tokenizer.chat_template")
    vision = "vision" in labels  # what lemoncore lets through (a GGUF's own tower needs
    # the projector file, which the llama.cpp plugin does not load)
    tools = template_has_tools(template) if metadata else bool(labels & _TOOL_LABELS)
    thinking = "reasoning" in labels or template_has_thinking(template)
    return [
        "completion",
        *(["vision"] if vision else []),
        *(["tools"] if tools else []),
        *(["thinking"] if thinking else []),
    ]


def _text(metadata: Mapping[str, GgufValue | GgufArray], key: str) -> str:
    value = metadata.get(key)
    return value if isinstance(value, str) else ""
