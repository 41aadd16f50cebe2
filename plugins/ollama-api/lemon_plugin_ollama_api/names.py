"""Model names between Ollama's ``name:tag`` and lemoncore's plain names."""

from __future__ import annotations

from lemoncore.plugin import Gateway, LemonError, ModelInfo

TAG = "latest"


def lemon_name(name: str) -> str:
    """The lemoncore model an Ollama client means: ``X:latest`` and ``X`` are ``X``.

    lemoncore names have no tags, so any other tag is kept and the name is then unknown
    (a 404), never silently another model."""
    return name.strip().removesuffix(f":{TAG}")


def ollama_name(name: str) -> str:
    """How ``/api/tags`` and ``/api/ps`` report lemoncore's model ``name``: ``name:latest``,
    which :func:`lemon_name` maps back."""
    return f"{name}:{TAG}"


def find(gateway: Gateway, name: str) -> ModelInfo:
    """The model an Ollama client names; an unknown one is a 404 that says where to look."""
    try:
        return gateway.model(lemon_name(name))
    except LemonError as exc:
        if exc.code != "model_not_found":
            raise
        raise LemonError(
            f"model {name!r} not found: GET /api/tags lists the downloaded "
            "models, /api/pull downloads a catalogue one",
            404,
            code="model_not_found",
        ) from exc
