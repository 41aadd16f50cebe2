"""The plugin passes lemoncore's conformance kit against its real engine, through a real
``lemon serve``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lemoncore.plugin import ChatConformance, ConformanceTarget, running_server


class TestConformance(ChatConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def conformance_target(
        cls, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[ConformanceTarget]:
        env = {"LEMON_PLUGINS_ALLOW": "example"}  # only this plugin: nothing else helps
        with running_server(tmp_path_factory.mktemp("example"), env) as server:
            yield ConformanceTarget(server, model="example-smollm2", backend="example:cpu")
