"""The routes this plugin serves: Ollama's API paths (none under ``/v1`` or ``/api/v1``)."""

from __future__ import annotations

from starlette.routing import Route

from lemon_plugin_ollama_api import inference, manage


def routes() -> list[Route]:
    return [
        Route("/", manage.heartbeat, methods=["GET"]),
        Route("/api/version", manage.api_version, methods=["GET"]),
        Route("/api/tags", manage.tags, methods=["GET"]),
        Route("/api/ps", manage.ps, methods=["GET"]),
        Route("/api/show", manage.show, methods=["POST"]),
        Route("/api/pull", manage.pull, methods=["POST"]),
        Route("/api/delete", manage.delete, methods=["DELETE"]),
        Route("/api/chat", inference.chat, methods=["POST"]),
        Route("/api/generate", inference.generate, methods=["POST"]),
        Route("/api/embed", inference.embed, methods=["POST"]),
        Route("/api/embeddings", inference.embeddings, methods=["POST"]),
        *(Route(f"/api/{what}", manage.refusal(what), methods=["POST"])
          for what in ("create", "copy", "push")),
        Route("/api/blobs/{digest}", manage.refusal("blobs"), methods=["POST", "HEAD"]),
    ]
