"""The conformance kit: one test suite every backend plugin runs against its real engine.

Subclass :class:`ChatConformance` (a backend that serves ``/v1/chat/completions``) or
:class:`BackendConformance` (any other: speech, transcription, embeddings...) in your
plugin's tests and provide the ``conformance_target`` fixture (a running lemoncore server
with your plugin, and a model your backend serves)::

    from lemoncore.conformance import ChatConformance, ConformanceTarget

    class TestMyBackend(ChatConformance):
        @pytest.fixture(scope="class")
        @classmethod
        def conformance_target(cls, tmp_path_factory):
            with running_server(tmp_path_factory.mktemp("lemon")) as server:
                yield ConformanceTarget(server, model="my-model", backend="mine:cpu")

:class:`BackendConformance` checks what every backend declares, through the endpoints
it declares (``Backend.endpoints``) and a sample request for each (lemoncore's
:data:`SAMPLES`, ``ConformanceTarget.samples`` for the endpoints you add, or an
``examples`` entry of the endpoint's declared body, ``Endpoint.request``): errors in the
endpoint's shape (unknown model 404, missing required field 400), readiness (lemoncore
reports a model ready only when its engine answers health, and the first request
answers), every served endpoint answering (Anthropic's and the Responses API too,
translated for a chat engine) with the served model's name, a clean shutdown within the
grace period, a declared number option's bounds enforced (400 naming it), a new engine
after the old one crashed, a device and policy consistent with the declared support rows,
and owner dispatch (a backend another plugin adds to your recipe is answered by that
plugin, never by yours, and yours never by it). It fails a backend that serves chat but
is tested with it rather than with :class:`ChatConformance`, which adds OpenAI's chat and
completions shapes (streaming and not), usage arithmetic, ``include_usage`` and the
served name in every chunk. A failure quotes what the server answered (status, body and,
on a 503, the engine's last lines).

``lemon validate`` runs the same checks on a user's machine (:func:`field_checks`), without
pytest; plugins add checks only real hardware can answer through
``register_field_checks`` (:class:`~lemoncore.fieldchecks.FieldCheck`,
re-exported here). See ``docs/validation.md``.

This module is the kit's public face; its code lives in :mod:`lemoncore.validation`
(``suite``, ``target``, ``intruder``), which plugins do not import directly.
"""

from __future__ import annotations

from lemoncore.fieldchecks import CheckSkipped, FieldCheck, FieldContext, FieldResult
from lemoncore.validation.chatsuite import ChatConformance
from lemoncore.validation.suite import BackendConformance, field_checks
from lemoncore.validation.target import SAMPLES, ConformanceTarget, Sample, Served

__all__ = [
    "SAMPLES",
    "BackendConformance",
    "ChatConformance",
    "CheckSkipped",
    "ConformanceTarget",
    "FieldCheck",
    "FieldContext",
    "FieldResult",
    "Sample",
    "Served",
    "field_checks",
]
