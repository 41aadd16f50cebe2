"""What the conformance kit runs against: :class:`ConformanceTarget` (a running server,
the model, the backend) and :data:`SAMPLES`, a request for each endpoint lemoncore routes
itself. Public as :mod:`lemoncore.conformance`'s names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypedDict

if TYPE_CHECKING:
    from httpx._types import FileTypes


class Served(Protocol):
    """A running lemoncore server (``lemoncore.testing.ServerProcess`` is one)."""

    @property
    def url(self) -> str: ...

    @property
    def api(self) -> str: ...


class Sample(TypedDict, total=False):
    """A sample request: ``httpx.post`` keyword arguments (the bodies are sent as given,
    with the model added)."""

    json: dict[str, object]
    data: dict[str, object]  # multipart form fields
    files: Mapping[str, FileTypes]


@dataclass
class ConformanceTarget:
    """What the kit runs against: ``server``, ``model`` (served by ``backend``, as
    ``recipe:backend``), the plugins the server loads (``plugins``, in-process;
    ``plugins_allow``, installed: ``None`` for all), the server's ``stop_grace`` and
    whether the engine serves ``/v1/completions`` (``completions``).

    ``samples``: a request for each endpoint your backend declares that lemoncore has
    no sample for (:data:`SAMPLES` covers lemoncore's own; a ``register_endpoints``
    endpoint needs one), by path, as ``httpx.post`` keyword arguments without the model
    (the kit puts it in the endpoint's ``model_field``): ``{"json": {...}}``, or
    ``{"data": {...}, "files": {...}}`` for a multipart upload. Every check that sends a
    request (errors, readiness, every endpoint, crash replacement) sends these. An
    endpoint whose declared body (``Endpoint.request``) has ``examples`` in its JSON
    schema needs none here: the first example is its sample, also for ``lemon
    validate``, which has no ``ConformanceTarget`` of yours."""

    server: Served
    model: str
    backend: str  # recipe:backend
    completions: bool = True  # the engine serves /v1/completions (non-streaming)
    stop_grace: float = 5.0
    samples: dict[str, Sample] = field(default_factory=dict)
    plugins: dict[str, object] = field(default_factory=dict)  # in-process, as the server's
    plugins_allow: list[str] | None = None  # installed plugins the server loads (None: all)


_HELLO = [{"role": "user", "content": "Say hello."}]
# A request for each endpoint lemoncore routes itself (the model is added).
SAMPLES: dict[str, Sample] = {
    "/v1/chat/completions": {"json": {"messages": _HELLO, "max_tokens": 4}},
    "/v1/completions": {"json": {"prompt": "One, two,", "max_tokens": 4}},
    "/v1/embeddings": {"json": {"input": "hello"}},
    "/v1/messages": {"json": {"messages": _HELLO, "max_tokens": 4}},
    "/v1/messages/count_tokens": {"json": {"messages": _HELLO}},
    "/v1/responses": {"json": {"input": "Say hello.", "max_output_tokens": 4}},
    "/v1/rerank": {"json": {"query": "fruit", "documents": ["apple", "car"]}},
    "/tokenize": {"json": {"content": "hello"}},
    "/detokenize": {"json": {"tokens": [1, 2]}},
}
