"""lemoncore models as Ollama describes them: ``/api/tags`` entries, ``details``,
``/api/show`` and ``/api/ps`` entries. Pure functions of a :class:`ModelInfo`, the facts
of its downloaded file (:class:`FileFacts`, read in a worker thread) and its GGUF
metadata."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from lemoncore.plugin import (
    GgufArray,
    GgufValue,
    ModelInfo,
    read_gguf_metadata,
    trained_context,
)

from lemon_plugin_ollama_api.capabilities import capabilities
from lemon_plugin_ollama_api.names import ollama_name

_QUANT = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d+(?:_[A-Z0-9]+)*|BF16|F16|F32)(?![A-Za-z0-9])", re.IGNORECASE
)
_PARAMS = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?[BM])(?![A-Za-z0-9])", re.IGNORECASE)


@dataclass(frozen=True)
class FileFacts:
    """A downloaded model file: its size, modification time and GGUF metadata."""

    size: int
    modified: datetime
    metadata: Mapping[str, GgufValue | GgufArray]


def file_facts(path: Path) -> FileFacts:
    """Read ``path``'s facts (blocking: call it in a worker thread)."""
    stat = path.stat()
    return FileFacts(
        stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC), read_gguf_metadata(path)
    )


def main_file(checkpoint: str) -> str:
    """The checkpoint's main file as its publisher names it: ``file.gguf`` of
    ``owner/repo:file.gguf``, else the path's last part."""
    if checkpoint.startswith(("pkg:", "file:", "/")):
        return PurePosixPath(checkpoint.split(":", 1)[-1]).name
    return checkpoint.partition(":")[2]


def digest(model: ModelInfo) -> str:
    """A SHA-256 hex digest naming the model: its main file's published SHA-256 where
    the model pins one (``sha256``), else the SHA-256 of ``"<name>\\n<checkpoint>"``,
    stable for as long as the model is registered so."""
    pinned = model.sha256.get(main_file(model.checkpoint))
    if pinned:
        return pinned
    return hashlib.sha256(f"{model.name}\n{model.checkpoint}".encode()).hexdigest()


def _text(metadata: Mapping[str, GgufValue | GgufArray], key: str) -> str:
    value = metadata.get(key)
    return value if isinstance(value, str) else ""


def parameter_size(model: ModelInfo, metadata: Mapping[str, GgufValue | GgufArray]) -> str:
    """``135M``, ``0.6B``: the GGUF size label, else the parameter count, else what the
    file name says; empty when none does."""
    if label := _text(metadata, "general.size_label"):
        return label
    count = metadata.get("general.parameter_count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"
    found = _PARAMS.search(PurePosixPath(main_file(model.checkpoint)).stem)
    return found.group(1).upper() if found else ""


def quantization(model: ModelInfo) -> str:
    """``Q4_K_M``, ``F16``: the quantization the file name states; empty if none."""
    found = _QUANT.search(PurePosixPath(main_file(model.checkpoint)).stem)
    return found.group(1).upper() if found else ""


def details(model: ModelInfo, metadata: Mapping[str, GgufValue | GgufArray]) -> dict[str, Any]:
    """Ollama's ``details``: the format is the main file's extension, the family the
    GGUF architecture; what is not known is empty."""
    family = _text(metadata, "general.architecture")
    return {
        "parent_model": "",
        "format": PurePosixPath(main_file(model.checkpoint)).suffix.lstrip(".").lower(),
        "family": family,
        "families": [family] if family else [],
        "parameter_size": parameter_size(model, metadata),
        "quantization_level": quantization(model),
    }


def listing(model: ModelInfo, facts: FileFacts) -> dict[str, Any]:
    """A downloaded model as ``/api/tags`` lists it; ``size`` is the main file's."""
    name = ollama_name(model.name)
    return {
        "name": name,
        "model": name,
        "modified_at": facts.modified.isoformat(),
        "size": facts.size,
        "digest": digest(model),
        "details": details(model, facts.metadata),
    }


def parameters(context: int) -> str:
    """Ollama's ``parameters`` text: ``num_ctx``, the context a load gives the model
    (:func:`context_length`), none when unknown."""
    return f"num_ctx {context}" if context > 0 else ""


def show(
    model: ModelInfo,
    facts: FileFacts | None,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """``/api/show``: details, capabilities (:mod:`.capabilities`: from the model and
    its file), the chat template (a Jinja template, as the GGUF carries it; Ollama's own
    are Go templates), the parameters (``options``: those a load uses; ``num_ctx`` is the
    context it gets, the GGUF's own when ``ctx_size`` is 0) and a Modelfile naming the
    checkpoint; ``model_info`` has the GGUF metadata, arrays as ``[]``, and
    ``<recipe>.context_length``, that same context, when known (Lemonade's key:
    ``OllamaApi::handle_show`` in ``src/cpp/server/ollama_api.cpp``; Ollama's
    ``<architecture>.context_length`` is the GGUF's, the context the model was trained
    with)."""
    metadata = facts.metadata if facts else {}
    template = _text(metadata, "tokenizer.chat_template")
    context = context_length(options, metadata)
    params = parameters(context)
    modelfile = [f"# Modelfile of lemoncore's model {model.name}", f"FROM {model.checkpoint}"]
    if template:
        modelfile.append(f'TEMPLATE """{template}"""')
    if params:
        modelfile.append(f"PARAMETER {params}")
    reply: dict[str, Any] = {
        "modelfile": "\n".join(modelfile) + "\n",
        "parameters": params,
        "template": template,
        "details": details(model, metadata),
        "model_info": {
            k: [] if isinstance(v, GgufArray) else v
            for k, v in metadata.items()
            if k != "tokenizer.chat_template"
        }
        | ({f"{model.recipe}.context_length": context} if context > 0 else {}),
        "capabilities": capabilities(model, metadata),
    }
    if license_ := _text(metadata, "general.license"):
        reply["license"] = license_
    if facts is not None:
        reply["modified_at"] = facts.modified.isoformat()
    return reply


def context_length(
    options: Mapping[str, Any], metadata: Mapping[str, GgufValue | GgufArray]
) -> int:
    """The context a server runs with: its ``ctx_size``, or (0, the model's own) the
    GGUF's trained context length; 0 when unknown."""
    ctx = options.get("ctx_size")
    if isinstance(ctx, int) and ctx > 0:
        return ctx
    return trained_context(metadata) or 0


def running(
    model: ModelInfo,
    facts: FileFacts | None,
    options: Mapping[str, Any],
    memory: int | None,
    on_gpu: bool,
    expires_at: datetime,
) -> dict[str, Any]:
    """A loaded model as ``/api/ps`` lists it: ``size`` is the server's peak memory (else
    the file's size); ``size_vram`` that size on a GPU, else 0."""
    metadata = facts.metadata if facts else {}
    size = memory or (facts.size if facts else 0)
    name = ollama_name(model.name)
    return {
        "name": name,
        "model": name,
        "size": size,
        "size_vram": size if on_gpu else 0,
        "digest": digest(model),
        "details": details(model, metadata),
        "expires_at": expires_at.isoformat(),
        "context_length": context_length(options, metadata),
    }
