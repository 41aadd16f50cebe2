"""The conformance kit: one test suite every backend plugin runs against its real engine.

Subclass :class:`BackendConformance` in your plugin's tests and provide the
``conformance_target`` fixture (a running lemoncore server with your plugin, and a model
your backend serves)::

    from lemoncore.conformance import BackendConformance, ConformanceTarget

    class TestMyBackend(BackendConformance):
        @pytest.fixture(scope="class")
        @classmethod
        def conformance_target(cls, tmp_path_factory):
            with running_server(tmp_path_factory.mktemp("lemon")) as server:
                yield ConformanceTarget(server, model="my-model", backend="mine:cpu")

The suite checks what clients and lemoncore rely on: OpenAI shapes for chat and
completions (streaming and not), the served model's name in every answer, usage
arithmetic, ``include_usage``, OpenAI-shaped
errors, readiness (lemoncore reports a model ready only when its engine answers health),
a clean shutdown within the grace period, a declared number option's bounds enforced
(400 naming it), a new engine after the old one crashed, every endpoint the backend
declares (and
Anthropic's and the Responses API, translated for a chat-only engine) answering, a
device and policy consistent with the backend's declared support rows, and owner
dispatch (a backend another plugin adds to your recipe is answered by that plugin, never
by yours, and yours never by it).

``lemon validate`` runs the same checks on a user's machine (:func:`field_checks`), without
pytest; plugins add checks only real hardware can answer through
``register_field_checks`` (:class:`~lemoncore.fieldchecks.FieldCheck`,
re-exported here). See ``docs/validation.md``.

This module is the kit's public face; its code lives in :mod:`lemoncore.validation`
(``suite``, ``target``, ``intruder``), which plugins do not import directly.
"""

from __future__ import annotations

from lemoncore.fieldchecks import CheckSkipped, FieldCheck, FieldContext, FieldResult
from lemoncore.validation.suite import BackendConformance, field_checks
from lemoncore.validation.target import SAMPLES, ConformanceTarget, Served

__all__ = [
    "SAMPLES",
    "BackendConformance",
    "CheckSkipped",
    "ConformanceTarget",
    "FieldCheck",
    "FieldContext",
    "FieldResult",
    "Served",
    "field_checks",
]
