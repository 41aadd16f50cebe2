"""What the backend under test declares, as the kit reads it: its recipe and backend
from the plugins the target's server loads (``load_plugins``), the endpoints it serves
for the target's model (declared in ``Backend.endpoints``, and those lemoncore
translates for it), and a sample request for each (:func:`sample`)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import httpx

from lemoncore.plugins import load_plugins
from lemoncore.recipes import Backend, Endpoint, Recipe
from lemoncore.translation import TRANSLATIONS
from lemoncore.validation.answers import expect, json_body
from lemoncore.validation.target import SAMPLES, ConformanceTarget, Sample

CHAT = "/v1/chat/completions"
FIX_SAMPLE = (
    "no sample request: give one in ConformanceTarget.samples[{path!r}] (the kit), or "
    "declare the endpoint's body (Endpoint.request) with an example "
    '(model_config = ConfigDict(json_schema_extra={{"examples": [{{...}}]}})), which '
    "the kit and lemon validate use"
)


def serves_chat(endpoints: Collection[str]) -> bool:
    """Whether a backend declaring ``endpoints`` serves chat (and so gets the chat kit)."""
    return CHAT in endpoints


@dataclass(frozen=True)
class Declared:
    """The target's recipe and backend, the model's type (``/v1/models``' ``type``) and
    the endpoints the backend serves for a model of that type, by path: what the
    backend declares first (sorted), then what lemoncore translates for it."""

    recipe: Recipe
    backend: Backend
    model_type: str
    endpoints: dict[str, Endpoint]

    @property
    def chat(self) -> bool:
        return CHAT in self.endpoints

    def primary(self, target: ConformanceTarget) -> Endpoint:
        """The endpoint the lifecycle checks (readiness, crash replacement) go through:
        chat when served, else the first declared one with a sample request."""
        if self.chat:
            return self.endpoints[CHAT]
        for endpoint in self.endpoints.values():
            if sample(target, endpoint) is not None:
                return endpoint
        paths = ", ".join(self.backend.endpoints) or "none"
        raise AssertionError(
            f"no endpoint of {target.backend} serves a {self.model_type} model with a "
            f"sample request (declared: {paths}); " + FIX_SAMPLE.format(path=paths)
        )


def declared(target: ConformanceTarget) -> Declared:
    """Read the backend's declarations and the model's type (fails naming what is
    missing)."""
    recipe_name, _, backend_name = target.backend.partition(":")
    registry = load_plugins(target.plugins_allow, (), target.plugins).registry
    recipe = registry.recipes.get(recipe_name)
    backend = recipe.backend(backend_name) if recipe is not None else None
    assert recipe is not None and backend is not None, (
        f"{target.backend} is not a backend of the plugins loaded here "
        "(ConformanceTarget.plugins and plugins_allow must match the server's)"
    )
    card = json_body(
        expect(
            httpx.get(f"{target.server.api}/models/{target.model}", timeout=30),
            200,
            target,
            f"the model {target.model!r}",
        ),
        target,
    )
    kind = str(card.get("model_type") or card.get("type") or "llm")
    paths = sorted(backend.endpoints) + sorted(
        p for p, t in TRANSLATIONS.items() if t.target in backend.endpoints
    )
    endpoints = {
        p: e
        for p in paths
        if (e := registry.endpoints.get(p)) is not None and e.model_type.value == kind
    }
    return Declared(recipe, backend, kind, endpoints)


def sample(target: ConformanceTarget, endpoint: Endpoint) -> Sample | None:
    """A request for ``endpoint`` without the model: ``target.samples``, else lemoncore's
    :data:`SAMPLES`, else the first ``examples`` entry of the endpoint's declared body
    (``Endpoint.request``'s JSON schema), else ``None``."""
    given = target.samples.get(endpoint.path) or SAMPLES.get(endpoint.path)
    if given is not None:
        return given
    if endpoint.request is None:
        return None
    examples = endpoint.request.model_json_schema().get("examples")
    if isinstance(examples, list) and examples and isinstance(examples[0], dict):
        return {"json": dict(examples[0])}
    return None


def request(
    target: ConformanceTarget, endpoint: Endpoint, model: str | None = None, drop: str = ""
) -> Sample:
    """``endpoint``'s sample with the model (``model`` or the target's) in its model
    field, and the field ``drop`` left out; fails saying how to give a sample."""
    given = sample(target, endpoint)
    assert given is not None, f"{endpoint.path}: " + FIX_SAMPLE.format(path=endpoint.path)
    built = Sample(**given)
    name = model or target.model
    if endpoint.body == "multipart":
        built["data"] = {**given.get("data", {}), endpoint.model_field: name}
        built["data"].pop(drop, None)
        if drop and drop in given.get("files", {}):
            built["files"] = {k: v for k, v in given.get("files", {}).items() if k != drop}
    else:
        built["json"] = {**given.get("json", {}), endpoint.model_field: name}
        built["json"].pop(drop, None)
    return built
