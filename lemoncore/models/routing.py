"""A router collection's policy over its requests: the document it registered with,
checked by Lemonade's parser (:mod:`lemoncore.routing.policy`), and the decision for one
request (:mod:`lemoncore.routing.decision`). Pure."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from lemoncore.errors import LemonError
from lemoncore.models.collections import Collection
from lemoncore.routing.decision import Decision, decide_route, features_from_body
from lemoncore.routing.policy import PolicyError, RoutePolicy, parse_route_policy


def document(collection: Collection) -> dict[str, object]:
    """The collection as the routing policy's parser reads it (Lemonade's registration
    body: ``version``, ``recipe``, ``components``, ``routing``)."""
    doc: dict[str, object] = {
        "model_name": collection.id,
        "recipe": collection.recipe,
        "components": list(collection.components),
    }
    if collection.version is not None:
        doc["version"] = collection.version
    if collection.routing is not None:
        doc["routing"] = dict(collection.routing)
    return doc


def policy_refusal(collection: Collection) -> str | None:
    """Why the parser refuses the collection's policy, or ``None``."""
    try:
        parse_route_policy(document(collection))
    except PolicyError as exc:
        return str(exc)
    return None


def policy(collection: Collection) -> RoutePolicy:
    """The collection's parsed policy (it parsed when the collection registered; one
    stored by an older lemoncore that no longer does is a 500 that says what to do)."""
    try:
        return _parsed(json.dumps(document(collection), sort_keys=True))
    except PolicyError as exc:
        raise LemonError(
            f"collection {collection.id!r}: its routing policy no longer parses ({exc}); "
            "register it again with a valid policy",
            status=500,
        ) from exc


@functools.lru_cache(maxsize=64)
def _parsed(doc: str) -> RoutePolicy:
    """A policy document (as JSON text) parsed once, not per request: parsing compiles
    its regexes."""
    return parse_route_policy(json.loads(doc))


@dataclass(frozen=True)
class RouteDecision:
    """Where one request goes, and how the answer reports it."""

    decision: Decision

    @property
    def route_to(self) -> str:
        return self.decision.route_to

    @property
    def header(self) -> str:
        """``x-lemonade-route``: the matched rule's id, or ``default``."""
        return self.decision.matched_rule or "default"

    def as_json(self, trace: bool) -> dict[str, JsonValue]:
        """``x_lemonade_route``: the decision, with its trace when ``trace``."""
        out: dict[str, Any] = self.decision.to_json()
        if not trace:
            out.pop("trace", None)
        return out


def route(collection: Collection, body: Mapping[str, object]) -> RouteDecision:
    """The decision for ``body`` (a chat, completion or Responses request)."""
    return RouteDecision(decide_route(policy(collection), features_from_body(body), trace=True))
