"""lemon-plugin-llamacpp passes lemoncore's conformance kit with a real llama-server (built
from source) and with llama.cpp's server from the prebuilt xllamacpp wheel."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lemoncore.plugin import ChatConformance, ConformanceTarget, running_server

from .conftest import prebuilt_server


class TestLlamaCppConformance(ChatConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def conformance_target(
        cls, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[ConformanceTarget]:
        with running_server(tmp_path_factory.mktemp("conformance")) as server:
            yield ConformanceTarget(server, "SmolLM2-135M-Instruct-GGUF", "llamacpp:pypi")


class TestPrebuiltConformance(ChatConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def conformance_target(
        cls, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[ConformanceTarget]:
        with prebuilt_server(tmp_path_factory.mktemp("prebuilt")) as server:
            yield ConformanceTarget(server, "SmolLM2-135M-Instruct-GGUF", "llamacpp:prebuilt")
