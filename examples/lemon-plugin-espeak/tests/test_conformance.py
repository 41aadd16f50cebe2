"""The plugin passes lemoncore's conformance kit against its real engine (espeak-ng),
through a real ``lemon serve``: a backend that serves only ``/v1/audio/speech``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lemoncore.plugin import BackendConformance, ConformanceTarget, Sample, running_server


class TestConformance(BackendConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def conformance_target(
        cls, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[ConformanceTarget]:
        env = {"LEMON_PLUGINS_ALLOW": "espeak"}  # only this plugin: nothing else helps
        # A request for each endpoint the backend adds (the kit adds the model).
        samples: dict[str, Sample] = {
            "/v1/audio/speech": {"json": {"input": "Hello.", "voice": "alloy"}}
        }
        with running_server(tmp_path_factory.mktemp("espeak"), env) as server:
            yield ConformanceTarget(
                server, model="espeak-en", backend="espeak:cpu", samples=samples
            )
