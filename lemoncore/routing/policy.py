"""Lemonade's ``collection.router`` routing documents, parsed and checked as Lemonade's
parser does: ``parse_route_policy_collection``, ``desugar_routing_router`` and the
classifier checks of ``parse_classifier_configs`` in src/cpp/server/routing_policy_parser.cpp
and ``make_classifier`` in src/cpp/server/routing_policy.cpp (lemonade-sdk/lemonade
@e385039); a rule's ``match`` is :mod:`lemoncore.routing.conditions`.
Pure: no I/O.

Contract: :func:`parse_route_policy` takes a decoded JSON document and returns a frozen
:class:`RoutePolicy`, or raises :class:`PolicyError` with Lemonade's message. Strict like
Lemonade's parser: a key outside its registries is refused, the first in key order (an
nlohmann object iterates sorted). Components are names, as ``/routing/validate`` resolves
them (the identity resolver of ``Server::handle_routing_validate``), but every candidate,
``default_model``, ``route_to`` and classifier ``model`` must be declared in
``components``. ``routing.router`` becomes one ``llm`` classifier ``__router`` and an
identity rule ``__route_N`` per candidate (:attr:`RoutePolicy.normalized_routing` keeps
that core form). Errors of the engine's compile step (a regex) come after every parse
error, as Lemonade builds its engine after parsing. :data:`MAX_RULES` is lemoncore's bound.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from lemoncore.routing.conditions import (
    Classifier,
    Compiler,
    Condition,
    OnError,
    PolicyError,
    check_match,
    json_type,
    known,
    optional_string,
    required,
    required_string,
)

__all__ = ["MAX_RULES", "PolicyError", "RoutePolicy", "Rule", "parse_route_policy"]

MAX_RULES = 1024  # lemoncore's bound, not Lemonade's
ROOT_KEYS = frozenset({"version", "model_name", "recipe", "components", "models", "routing"})
BLOCK_KEYS = frozenset({"candidates", "default_model", "router", "classifiers", "rules"})
ROUTER_KEYS = frozenset({"type", "model", "prompt"})
CLASSIFIER_KEYS = frozenset(
    {"id", "type", "model", "prompt", "labels", "default_label", "reference_phrases", "on_error"}
)
RULE_KEYS = frozenset({"id", "match", "route_to", "outputs"})
RESERVED_TYPES = frozenset(
    {"pii_detection", "prompt_safety", "language_detection", "domain_classification"}
    | {"complexity", "sentiment"}
)
_RULE_ID = re.compile(r"[A-Za-z0-9._-]*")


@dataclass(frozen=True, slots=True)
class Rule:
    """One ordered rule (``Rule``): ``outputs`` is copied verbatim into the decision."""

    id: str
    match: Condition
    route_to: str
    outputs: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class RoutePolicy:
    """Engine-ready policy (``RoutePolicy``, routing_policy.h): ordered rules, first match
    wins, fail open to ``default_model``."""

    candidates: tuple[str, ...]
    default_model: str
    rules: tuple[Rule, ...]
    classifiers: Mapping[str, Classifier]
    helper_models: tuple[str, ...]  # collect_policy_helper_models
    normalized_routing: Mapping[str, object]  # the core-form routing block that was parsed


def _declared(name: str, declared: frozenset[str], path: str) -> str:
    if name not in declared:
        raise PolicyError(
            f"{path} references component '{name}' that is not declared in collection.components"
        )
    return name


# The document (routing_policy_parser.cpp) ------------------------------------------


def parse_route_policy(doc: object) -> RoutePolicy:
    """A ``collection.router`` document as ``parse_route_policy_collection`` checks it,
    compiled as ``RoutingPolicyEngine``'s constructor does (regex errors come last)."""
    collection = known(doc, ROOT_KEYS, "collection")
    version = required_string(collection, "version", "collection")
    major = version.split(".", 1)[0]
    if major != "1":
        raise PolicyError(
            f"Unsupported collection.router schema major '{major}' from version "
            f"'{version}'; supported major is '1'"
        )
    if version != "1":
        raise PolicyError(
            f"Unsupported collection.router schema version '{version}'; "
            "this parser implements version '1'"
        )
    if required_string(collection, "recipe", "collection") != "collection.router":
        raise PolicyError("collection.recipe must be 'collection.router' for a routing policy")
    declared = _components(collection)
    routing = known(required(collection, "routing", "collection"), BLOCK_KEYS, "routing")
    candidates = _candidates(routing, declared)
    default = _declared(
        required_string(routing, "default_model", "routing"), declared, "routing.default_model"
    )
    if default not in candidates:
        raise PolicyError(f"routing.default_model '{default}' must be listed in routing.candidates")
    core = _desugar(routing) if "router" in routing else routing
    classifiers = _classifiers(core, declared)
    rules = _rules(core, candidates, classifiers, declared)
    compiler = Compiler(classifiers)
    compiled = tuple(Rule(rid, compiler.expr(m), route, out) for rid, m, route, out in rules)
    models = sorted({c.model for c in classifiers.values() if c.model})
    return RoutePolicy(candidates, default, compiled, classifiers, tuple(models), core)


def _components(collection: Mapping[str, object]) -> frozenset[str]:
    if "components" not in collection:
        raise PolicyError("collection.router requires a non-empty components array")
    value = collection["components"]
    if not isinstance(value, list) or not value:
        raise PolicyError("collection.components must be a non-empty array")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise PolicyError(f"collection.components[{i}] must be a non-empty string")
    return frozenset(value)


def _candidates(routing: Mapping[str, object], declared: frozenset[str]) -> tuple[str, ...]:
    value = required(routing, "candidates", "routing")
    if not isinstance(value, list) or not value:
        raise PolicyError("routing.candidates must be a non-empty array")
    seen: list[str] = []
    for i, item in enumerate(value):
        path = f"routing.candidates[{i}]"
        if not isinstance(item, str) or not item:
            raise PolicyError(f"{path} must be a non-empty string")
        if _declared(item, declared, path) in seen:
            raise PolicyError(f"{path} duplicates candidate '{item}'")
        seen.append(item)
    return tuple(seen)


def _desugar(routing: Mapping[str, object]) -> dict[str, object]:
    """``desugar_routing_router``: one ``llm`` classifier labelled with the candidates as
    authored, one ``__route_N`` rule per candidate."""
    router = known(routing["router"], ROUTER_KEYS, "routing.router")
    if required_string(router, "type", "routing.router") != "llm":
        raise PolicyError("routing.router.type must be 'llm'")
    if "classifiers" in routing or "rules" in routing:
        raise PolicyError(
            "routing.router cannot be combined with routing.classifiers or routing.rules"
        )
    required_string(router, "model", "routing.router")
    required_string(router, "prompt", "routing.router")
    authored = routing["candidates"]
    assert isinstance(authored, list)  # checked by _candidates
    out = {k: v for k, v in routing.items() if k != "router"}
    out["classifiers"] = [
        {"id": "__router", "type": "llm", "model": router["model"], "prompt": router["prompt"]}
        | {"labels": list(authored)}
    ]
    out["rules"] = [
        {"id": f"__route_{i}", "match": {"classifier": "__router", "label": c, "min_score": 1.0}}
        | {"route_to": c}
        for i, c in enumerate(authored)
    ]
    return out


def _classifiers(routing: Mapping[str, object], declared: frozenset[str]) -> dict[str, Classifier]:
    """``parse_classifier_configs`` over every entry, then ``make_classifiers``."""
    configs = routing.get("classifiers", [])
    if not isinstance(configs, list):
        raise PolicyError("routing.classifiers must be an array")
    checked: list[dict[str, object]] = []
    for i, entry in enumerate(configs):
        path = f"routing.classifiers[{i}]"
        config = known(entry, CLASSIFIER_KEYS, path)
        required_string(config, "id", path)
        required_string(config, "type", path)
        if "on_error" in config and optional_string(config, "on_error", path) not in {
            "match_true",
            "match_false",
        }:
            raise PolicyError(f"{path}.on_error must be match_true or match_false")
        if "model" in config:
            _declared(optional_string(config, "model", path), declared, f"{path}.model")
        checked.append(config)
    made: dict[str, Classifier] = {}
    for config in checked:
        classifier = _make_classifier(config)
        if classifier.id in made:
            raise PolicyError(f"duplicate classifier id: {classifier.id}")
        made[classifier.id] = classifier
    return made


def _make_classifier(config: Mapping[str, object]) -> Classifier:
    """``make_classifier``: the type-specific checks, in Lemonade's order."""
    cid, ctype = str(config["id"]), str(config["type"])
    on_error: OnError = "match_true" if config.get("on_error") == "match_true" else "match_false"
    model = str(config.get("model", ""))
    if ctype in RESERVED_TYPES:
        raise PolicyError(f"classifier type not implemented yet: {ctype}")
    if ctype not in {"classifier", "semantic_similarity", "llm"}:
        raise PolicyError(f"unknown classifier type: {ctype}")
    concepts: tuple[tuple[str, tuple[str, ...]], ...] = ()
    if ctype == "semantic_similarity":
        if "labels" in config:
            raise PolicyError(
                f"semantic_similarity classifier '{cid}' does not accept labels; "
                "concept names are the reference_phrases keys"
            )
        concepts = _reference_phrases(config, cid)
        labels = tuple(name for name, _ in concepts)
    else:
        labels = _labels(config, cid)
    default = _default_label(config, labels, cid)
    prompt = config.get("prompt", "")
    if ctype == "llm" and not isinstance(prompt, str):  # nlohmann's value() throws
        raise PolicyError(f"type must be string, but is {json_type(prompt)}")
    if not model:
        raise PolicyError(
            f"{'' if ctype == 'classifier' else ctype + ' '}classifier requires model"
        )
    if ctype == "llm" and not prompt:
        raise PolicyError("llm classifier requires prompt")
    if ctype == "llm" and not labels:
        raise PolicyError("llm classifier requires at least one label (candidate)")
    text = prompt if ctype == "llm" and isinstance(prompt, str) else ""
    return Classifier(cid, ctype, model, on_error, labels, default, text, concepts)


def _labels(config: Mapping[str, object], cid: str) -> tuple[str, ...]:
    value = config.get("labels", [])
    if not isinstance(value, list):
        raise PolicyError(f"classifier '{cid}' labels must be an array")
    if not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f"classifier '{cid}' labels must be non-empty strings")
    return tuple(value)


def _default_label(config: Mapping[str, object], labels: tuple[str, ...], cid: str) -> str | None:
    if "default_label" not in config:
        return None
    value = config["default_label"]
    if not isinstance(value, str) or not value:
        raise PolicyError(f"classifier '{cid}' default_label must be a non-empty string")
    if not labels:
        raise PolicyError(f"classifier '{cid}' default_label requires labels")
    if value not in labels:
        raise PolicyError(f"classifier '{cid}' default_label is not declared in labels")
    return value


def _reference_phrases(
    config: Mapping[str, object], cid: str
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    who = f"semantic_similarity classifier '{cid}'"
    if "reference_phrases" not in config:
        raise PolicyError(f"{who} requires reference_phrases")
    phrases = config["reference_phrases"]
    if not isinstance(phrases, dict) or not phrases:
        raise PolicyError(
            f"{who} reference_phrases must be a non-empty object mapping concept -> phrases"
        )
    concepts = []
    for name in sorted(phrases):
        items = phrases[name]
        if not name:
            raise PolicyError(f"{who} has an empty concept name")
        if not isinstance(items, list) or not items:
            raise PolicyError(
                f"{who} concept '{name}' must have a non-empty array of reference phrases"
            )
        if not all(isinstance(v, str) and v for v in items):
            raise PolicyError(f"{who} concept '{name}' reference phrases must be non-empty strings")
        concepts.append((name, tuple(items)))
    return tuple(concepts)


def _rules(
    routing: Mapping[str, object],
    candidates: tuple[str, ...],
    classifiers: Mapping[str, Classifier],
    declared: frozenset[str],
) -> list[tuple[str, object, str, dict[str, object]]]:
    """``parse_rules``: (id, checked raw match, route_to, outputs) per rule."""
    value = required(routing, "rules", "routing")
    if not isinstance(value, list) or not value:
        raise PolicyError("routing.rules must be a non-empty array")
    if len(value) > MAX_RULES:
        raise PolicyError(f"routing.rules has more than {MAX_RULES} rules")
    out: list[tuple[str, object, str, dict[str, object]]] = []
    ids: set[str] = set()
    for i, entry in enumerate(value):
        path = f"routing.rules[{i}]"
        rule = known(entry, RULE_KEYS, path)
        rid = required_string(rule, "id", path)
        if not _RULE_ID.fullmatch(rid):
            raise PolicyError(f"{path}.id must match [A-Za-z0-9._-]")
        if rid in ids:
            raise PolicyError(f"{path}.id duplicates rule id '{rid}'")
        ids.add(rid)
        match = required(rule, "match", path)
        check_match(match, classifiers, f"{path}.match", 0)
        route = _declared(required_string(rule, "route_to", path), declared, f"{path}.route_to")
        if route not in candidates:
            raise PolicyError(f"{path}.route_to '{route}' must be listed in routing.candidates")
        outputs = rule.get("outputs", {})
        if not isinstance(outputs, dict):
            raise PolicyError(f"{path}.outputs must be an object")
        out.append((rid, match, route, outputs))
    return out
