"""Lemonade's routing policy as pure functions (routing_policy, routing_conditions,
routing_regex, routing_decision): the parser's refusals in its words, the regex guards, the
``routing.router`` desugaring, classifier bands over given scores and failed (absent)
classifiers, and the request features ``build_route_context`` reads. Lemonade's
conformance corpus is test_routing_conformance.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from lemoncore.routing.conditions import MAX_MATCH_DEPTH, PolicyError
from lemoncore.routing.decision import (
    REGEX_BUDGET_S,
    RouteFeatures,
    Score,
    decide_route,
    features_from_body,
    trace_requested,
)
from lemoncore.routing.policy import MAX_RULES, parse_route_policy
from lemoncore.routing.regex import compile_regex


def chat(content: object, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], **extra}


def doc(routing: dict[str, Any], components: list[str] | None = None) -> dict[str, Any]:
    """A collection.router document around ``routing``; components: its candidates."""
    return {
        "version": "1",
        "recipe": "collection.router",
        "components": components or list(routing["candidates"]),
        "routing": routing,
    }


# The parser's refusals (routing_policy_parser.cpp, make_classifier) ---------------------

BASE: dict[str, Any] = {
    "candidates": ["small", "big"],
    "default_model": "small",
    "rules": [{"id": "code", "match": {"keywords_any": ["def "]}, "route_to": "big"}],
}


def with_routing(**changes: Any) -> dict[str, Any]:
    return doc({**BASE, **changes}, ["small", "big"])


def top(**changes: Any) -> dict[str, Any]:
    """The document with root keys changed (``None``: removed)."""
    out = {**with_routing(), **changes}
    return {k: v for k, v in out.items() if v is not None}


def with_match(match: Any) -> dict[str, Any]:
    return with_routing(rules=[{"id": "r", "match": match, "route_to": "big"}])


CLASSIFIER = {"id": "pii", "type": "classifier", "model": "small", "labels": ["safe", "unsafe"]}


def classified(match: dict[str, Any] | None = None, **classifier: Any) -> dict[str, Any]:
    """A policy with one classifier (CLASSIFIER with ``classifier``; a ``None`` value drops
    the key), matched by ``{"classifier": "pii", **match}``, or unused when ``match`` is
    ``None``."""
    entry = {k: v for k, v in {**CLASSIFIER, **classifier}.items() if v is not None}
    if match is None:
        return with_routing(classifiers=[entry])
    rule = {"id": "r", "match": {"classifier": "pii", **match}, "route_to": "big"}
    return with_routing(classifiers=[entry], rules=[rule])


ROUTING = {k: v for k, v in BASE.items() if k != "rules"}
LLM = {"type": "llm", "model": "small"}
RULE = BASE["rules"][0]


def undeclared(name: str) -> str:
    return f"references component '{name}' that is not declared in collection.components"


REFUSED = [
    (top(extra=1), "collection contains unknown key 'extra'"),
    (top(version="2"), "Unsupported collection.router schema major '2' from version '2'"),
    (top(version="1.1"), "Unsupported collection.router schema version '1.1'"),
    (top(version=1), "collection.version must be a non-empty string"),
    (top(recipe="collection.omni"), "collection.recipe must be 'collection.router' for a"),
    (top(components=None), "collection.router requires a non-empty components array"),
    (top(components=[]), "collection.components must be a non-empty array"),
    (top(components=["a", 3]), "collection.components[1] must be a non-empty string"),
    (top(routing=None), "collection is missing required key 'routing'"),
    (top(routing=[]), "routing must be an object"),
    (with_routing(zeta=1, alpha=2), "routing contains unknown key 'alpha'"),  # key order
    (with_routing(candidates=[]), "routing.candidates must be a non-empty array"),
    (with_routing(candidates=["small", "big", "x"]), "candidates[2] " + undeclared("x")),
    (with_routing(candidates=["small", "small"]), "routing.candidates[1] duplicates candidate"),
    (with_routing(default_model=""), "routing.default_model must be a non-empty string"),
    (with_routing(candidates=["big"]), "default_model 'small' must be listed in routing.candi"),
    (top(routing=ROUTING), "routing is missing required key 'rules'"),
    (with_routing(rules=[]), "routing.rules must be a non-empty array"),
    (with_routing(rules=[{**RULE, "id": "a b"}]), "rules[0].id must match [A-Za-z0-9._-]"),
    (with_routing(rules=BASE["rules"] * 2), "routing.rules[1].id duplicates rule id 'code'"),
    (with_routing(rules=[{**RULE, "route_to": "x"}]), "route_to " + undeclared("x")),
    (doc({**BASE, "candidates": ["small"]}, ["small", "big"]), "route_to 'big' must be listed"),
    (with_routing(rules=[{**RULE, "outputs": []}]), "rules[0].outputs must be an object"),
    (with_routing(rules=[{**RULE, "why": 1}]), "rules[0] contains unknown key 'why'"),
    (with_match({}), "routing.rules[0].match must contain at least one leaf condition"),
    (with_match({"keyword": ["x"]}), "routing.rules[0].match contains unknown key 'keyword'"),
    (with_match({"any": [], "all": []}), "must contain only one logical operator"),
    (with_match({"any": [{"has_tools": True}], "has_images": True}), "cannot mix logical"),
    (with_match({"any": []}), "routing.rules[0].match.any must be a non-empty array"),
    (with_match({"all": [{"not": {"x": 1}}]}), "match.all[0].not contains unknown key 'x'"),
    (with_match({"keywords_any": []}), "match.keywords_any must be a non-empty array"),
    (with_match({"keywords_all": ["a", ""]}), "match.keywords_all[1] must be a non-empty string"),
    (with_match({"regex": ""}), "match.regex must be a non-empty string"),
    (with_match({"min_chars": -1}), "match.min_chars must be a non-negative integer"),
    (with_match({"max_chars": 1.0}), "match.max_chars must be a non-negative integer"),
    (with_match({"max_chars": True}), "match.max_chars must be a non-negative integer"),
    (with_match({"min_chars": 2**63}), "match.min_chars must be a non-negative integer"),
    (with_match({"has_tools": "yes"}), "match.has_tools must be a boolean"),
    (with_match({"has_images": 1}), "match.has_images must be a boolean"),
    (with_match({"label": "x"}), "match.label requires a classifier condition"),
    (with_match({"min_score": 0.5, "has_tools": True}), "min_score requires a classifier"),
    (with_match({"metadata": {"key": "k"}}), "must contain exactly one comparator"),
    (with_match({"metadata": {"key": "k", "equals": "a", "exists": True}}), "exactly one"),
    (with_match({"metadata": {"equals": "a"}}), "match.metadata is missing required key 'key'"),
    (with_match({"metadata": {"key": "k", "equals": 1}}), "match.metadata.equals must be a string"),
    (with_match({"metadata": {"key": "k", "any": []}}), "match.metadata.any must be a non-empty"),
    (with_match({"metadata": {"key": "k", "exists": "y"}}), "match.metadata.exists must be a bool"),
    (with_match({"metadata": {"key": "k", "in": []}}), "match.metadata contains unknown key 'in'"),
    (with_match({"classifier": "nope"}), "match.classifier references unknown classifier 'nope'"),
    (with_routing(classifiers={}), "routing.classifiers must be an array"),
    (classified(model="elsewhere"), ".model " + undeclared("elsewhere")),
    (classified(on_error="x"), "routing.classifiers[0].on_error must be match_true or match_false"),
    (classified(type="bert"), "unknown classifier type: bert"),
    (classified(type="sentiment"), "classifier type not implemented yet: sentiment"),
    (classified(model=None), "classifier requires model"),
    (with_routing(classifiers=[CLASSIFIER, CLASSIFIER]), "duplicate classifier id: pii"),
    (classified(default_label="maybe"), "classifier 'pii' default_label is not declared in labels"),
    (classified(type="semantic_similarity"), "semantic_similarity classifier 'pii' does not"),
    (classified(type="semantic_similarity", labels=None), "'pii' requires reference_phrases"),
    (classified(type="llm"), "llm classifier requires prompt"),
    (classified(type="llm", prompt="p", labels=None), "llm classifier requires at least one label"),
    (classified({}), "rules[0].match omits label but classifier 'pii' has no default_label"),
    (classified({"label": "x"}), "match.label references unknown label 'x' on classifier 'pii'"),
    (classified({"label": "safe", "min_score": 1.5}), "match.min_score must be in [0, 1]"),
    (classified({"label": "safe", "min_score": 0.8, "max_score": 0.2}), "min_score greater"),
    (with_routing(router={**LLM, "prompt": "p"}), "routing.router cannot be combined with"),
    (doc({**ROUTING, "router": {"type": "bert"}}), "routing.router.type must be 'llm'"),
    (doc({**ROUTING, "router": LLM}), "routing.router is missing required key 'prompt'"),
    (with_match({"regex": "(a+)+"}), "regex pattern is prone to catastrophic backtracking"),
    (with_match({"regex": "[unterminated"}), "regex pattern is not valid ECMAScript"),
    (with_match({"regex": "(?i)abc"}), "regex pattern is not valid ECMAScript"),
]


@pytest.mark.parametrize(("document", "words"), REFUSED, ids=[w for _, w in REFUSED])
def test_a_bad_policy_is_refused_in_lemonades_words(document: Any, words: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_route_policy(document)
    assert words in str(refused.value)


def test_a_regex_error_comes_after_every_parse_error() -> None:
    """The engine compiles regexes once the whole document parsed (RoutingPolicyEngine)."""
    rules = [
        {"id": "a", "match": {"regex": "(a+)+"}, "route_to": "big"},
        {"id": "b", "match": {"has_tools": "yes"}, "route_to": "big"},
    ]
    with pytest.raises(PolicyError, match="has_tools must be a boolean"):
        parse_route_policy(with_routing(rules=rules))


def test_nesting_deeper_than_lemonades_limit_is_refused() -> None:
    def nested(depth: int) -> dict[str, Any]:
        match: dict[str, Any] = {"has_tools": True}
        for _ in range(depth):
            match = {"not": match}
        return match

    parse_route_policy(with_match(nested(MAX_MATCH_DEPTH)))
    with pytest.raises(PolicyError, match="exceeds maximum match expression depth"):
        parse_route_policy(with_match(nested(MAX_MATCH_DEPTH + 1)))


def test_too_many_rules_are_refused() -> None:
    rule = {"match": {"has_tools": True}, "route_to": "big"}
    rules = [{"id": f"r{i}", **rule} for i in range(MAX_RULES + 1)]
    parse_route_policy(with_routing(rules=rules[:MAX_RULES]))
    with pytest.raises(PolicyError, match="more than"):
        parse_route_policy(with_routing(rules=rules))


# Regex (make_deterministic_leaf_factories["regex"], reject_catastrophic_regex) ----------


@pytest.mark.parametrize(
    "pattern", ["(a+)+", "(a*)*", "(.*)+", r"(\d+){2,}", "((a+)+)+", "((a+))+", "(a(b+))+"]
)
def test_nested_unbounded_quantifiers_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="catastrophic backtracking"):
        compile_regex(pattern)


@pytest.mark.parametrize(
    "pattern",
    ["(ab)+", r"(\d+)", "(a+){1,3}", "(a{1,3})+", "```[a-z]*", r"\$\d+", "[(+]+", "(?:ab)+"],
)
def test_bounded_or_flat_quantifiers_are_accepted(pattern: str) -> None:
    compile_regex(pattern)


def test_regex_searches_bytes_with_ecmascript_anchors() -> None:
    assert compile_regex(r"\d{3,}").search(b"code 12345")
    assert not compile_regex("end$").search(b"the end\n")  # $: end of input only
    assert compile_regex("end$").search(b"the end")
    assert not compile_regex("^.$").search("é".encode())  # . is one byte, as std::regex
    assert compile_regex("^..$").search("é".encode())
    assert not compile_regex("a.b").search(b"a\rb")  # libstdc++: . is no line terminator
    assert compile_regex("a[.]b{2}").search(b"a.bb")  # in a class, . is a dot


@pytest.mark.parametrize("pattern", ["(?P<n>a)", "(?<=a)b", "(?i)a", "a*+", "a{2}+", "a+?+"])
def test_python_only_regex_syntax_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="not valid ECMAScript"):
        compile_regex(pattern)


def test_a_regex_over_one_mib_of_input_does_not_match() -> None:
    policy = parse_route_policy(with_match({"regex": "x"}))
    near = RouteFeatures(text="a" * ((1 << 20) - 1) + "x")
    assert decide_route(policy, near).matched_rule == "r"
    over = RouteFeatures(text="a" * (1 << 20) + "x")
    decision = decide_route(policy, over)
    assert decision.default_used and decision.trace[0].result is False


def test_a_multi_key_leaf_evaluates_its_ops_in_lemonades_key_order() -> None:
    """make_leaf_factory walks a std::map: has_tools before keywords_any, and the
    implicit all stops at the first false op."""
    policy = parse_route_policy(with_match({"keywords_any": ["x"], "has_tools": True}))
    decision = decide_route(policy, RouteFeatures(text="x"))
    assert [(t.condition, t.result) for t in decision.trace] == [("has_tools", False)]


# routing.router and classifiers ----------------------------------------------------------

ROUTER = {
    "candidates": ["Qwen3-8B-GGUF", "Qwen3.5-35B-A3B-GGUF"],
    "default_model": "Qwen3-8B-GGUF",
    "router": {"type": "llm", "model": "router-model", "prompt": "Reply with a model name."},
}


def test_the_llm_router_desugars_and_fails_open_without_a_classifier() -> None:
    policy = parse_route_policy(doc(ROUTER, [*ROUTER["candidates"], "router-model"]))
    routing: dict[str, Any] = dict(policy.normalized_routing)
    assert "router" not in routing
    assert routing["classifiers"] == [
        {
            "id": "__router",
            "type": "llm",
            "model": "router-model",
            "prompt": "Reply with a model name.",
            "labels": ["Qwen3-8B-GGUF", "Qwen3.5-35B-A3B-GGUF"],
        }
    ]
    assert [r["id"] for r in routing["rules"]] == ["__route_0", "__route_1"]
    assert routing["rules"][1]["match"] == {
        "classifier": "__router",
        "label": "Qwen3.5-35B-A3B-GGUF",
        "min_score": 1.0,
    }
    assert policy.helper_models == ("router-model",)
    decision = decide_route(policy, RouteFeatures(text="hello")).to_json()
    assert decision == {
        "version": "1",
        "route_to": "Qwen3-8B-GGUF",
        "matched_rule": "",
        "default_used": True,
        "outputs": {},
        "trace": [
            {"condition": "classifier:__router", "result": False, "label": "Qwen3-8B-GGUF"},
            {"condition": "classifier:__router", "result": False, "label": "Qwen3.5-35B-A3B-GGUF"},
        ],
    }
    chosen = {"__router": Score({"Qwen3.5-35B-A3B-GGUF": 1.0}, rationale="long context")}
    picked = decide_route(policy, RouteFeatures(text="hello"), scores=chosen)
    assert (picked.route_to, picked.matched_rule) == ("Qwen3.5-35B-A3B-GGUF", "__route_1")
    assert [(t.score, t.rationale) for t in picked.trace] == [(0.0, ""), (1.0, "long context")]


def test_the_llm_router_model_must_be_declared() -> None:
    with pytest.raises(PolicyError, match=r"routing\.classifiers\[0\]\.model references"):
        parse_route_policy(doc(ROUTER))


def band_policy(match: dict[str, Any], **classifier: Any) -> Any:
    return parse_route_policy(
        with_routing(
            classifiers=[{**CLASSIFIER, **classifier}],
            rules=[{"id": "flag", "match": {"classifier": "pii", **match}, "route_to": "big"}],
        )
    )


def test_a_failed_classifier_takes_its_on_error() -> None:
    default = band_policy({"label": "unsafe"})
    assert decide_route(default, RouteFeatures()).default_used
    tripped = band_policy({"label": "unsafe"}, on_error="match_true")
    decision = decide_route(tripped, RouteFeatures())
    assert decision.matched_rule == "flag"
    assert decision.trace[0].to_json() == {
        "condition": "classifier:pii",
        "result": True,
        "label": "unsafe",
    }


@pytest.mark.parametrize(
    ("match", "classifier", "labels", "hit"),
    [
        ({"label": "unsafe"}, {}, {"unsafe": 0.5}, True),  # default band: min_score 0.5
        ({"label": "unsafe"}, {}, {"unsafe": 0.49}, False),
        ({"label": "unsafe", "max_score": 0.3}, {}, {"unsafe": 0.3}, True),  # inclusive
        ({"label": "unsafe", "min_score": 0.9}, {}, {"safe": 1.0}, False),  # absent label: 0
        ({}, {"default_label": "unsafe"}, {"unsafe": 0.7, "safe": 0.3}, True),
        ({}, {"labels": []}, {"score": 0.8}, True),  # label-less: the lone score
        ({}, {"labels": []}, {"a": 0.8, "b": 0.9}, False),  # two labels: primary() is 0
    ],
)
def test_a_classifier_band_reads_the_score_as_lemonade_does(
    match: dict[str, Any], classifier: dict[str, Any], labels: dict[str, float], hit: bool
) -> None:
    policy = band_policy(match, **classifier)
    decision = decide_route(policy, RouteFeatures(), scores={"pii": Score(labels)})
    assert decision.default_used is not hit


# Request features (build_route_context) ----------------------------------------------------


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (chat("hi"), "hi"),
        (
            {
                "messages": [
                    {"role": "user", "content": "first"},
                    {"role": "assistant", "content": "reply"},
                    {"role": "user", "content": [{"type": "text", "text": "a"}, "x"]}
                    | {"name": "u"},
                ]
            },
            "a",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}] * 2}]}, "a\na"),
        ({"messages": [{"role": 7, "content": "x"}]}, ""),  # a non-string role is no user
        ({"messages": "not a list", "prompt": "p"}, "p"),  # falls to the prompt branch
        ({"prompt": ["", "a", "", "b"]}, "a\n\nb"),  # append_line: no newline before text
        ({"prompt": 5, "input": "ignored"}, ""),  # a prompt key wins over input
        ({"input": [{"role": "assistant", "content": "no"}, "yes"]}, "yes"),
        ({"input": [{"type": "input_text", "text": "x"}, {"content": []}, "y"]}, "x\ny"),
    ],
)
def test_the_routing_text_is_lemonades(body: dict[str, Any], text: str) -> None:
    assert features_from_body(body).text == text


def test_features_flags_and_metadata() -> None:
    body = {
        "input": [{"role": "user", "content": "see"}, {"content": [{"type": "input_image"}]}],
        "tools": [{"type": "function"}],
        "metadata": {"tenant": "acme", "n": 3},
        "route_trace": "yes",
    }
    features = features_from_body(body)
    assert (features.has_images, features.has_tools) == (True, True)
    assert features.metadata == {"tenant": "acme"}  # non-string values are dropped
    assert not trace_requested(body)
    assert RouteFeatures(text="éé").chars == 4


def test_a_backtracking_regex_spends_the_budget_then_no_more() -> None:
    """``(a|aa)+$`` passes Lemonade's nested-quantifier check and backtracks exponentially
    on a's then b: each search is cut when the decision's regex budget is spent, and the
    rule falls through to the default instead of holding the request (or the server)."""
    slow = {"regex": "(a|aa)+$"}
    rules = [{"id": f"r{i}", "match": slow, "route_to": "big"} for i in range(20)]
    policy = parse_route_policy(with_routing(rules=rules))
    started = time.monotonic()
    decision = decide_route(policy, RouteFeatures(text="a" * 5000 + "b"))
    assert decision.default_used and decision.route_to == "small"
    assert time.monotonic() - started < 10 * REGEX_BUDGET_S  # 20 searches: one budget
    assert [t.result for t in decision.trace] == [False] * 20
