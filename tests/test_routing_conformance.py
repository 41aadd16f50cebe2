"""Lemonade's deterministic routing conformance corpus, every case of its
test/conformance/routing/1 (policy.json + cases.jsonl per group, encoded here), replayed
through parse_route_policy, features_from_body and decide_route: every field of the Decision must be
the recorded one, as Lemonade's RoutingConformanceCorpusTest compares it."""

from __future__ import annotations

from typing import Any

import pytest

from lemoncore.routing.decision import decide_route, features_from_body, trace_requested
from lemoncore.routing.policy import parse_route_policy


def chat(content: object, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], **extra}


# Lemonade's conformance corpus: test/conformance/routing/1/<group>/policy.json, as
# routing(default, *rules), and its cases.jsonl, as (name, request, expected decision).


def routing(default: str, *rules: tuple[str, dict[str, Any], str]) -> dict[str, Any]:
    candidates = ["local", "cloud", "edge"] if any(r[2] == "edge" for r in rules) else []
    return {
        "candidates": candidates or ["local", "cloud"],
        "default_model": default,
        "rules": [{"id": i, "match": m, "route_to": to} for i, m, to in rules],
    }


def decision(route_to: str, rule: str = "", trace: str | None = None, **outputs: Any) -> Any:
    """The Decision; ``trace``: ``"op+ op-"`` for entries with result true / false."""
    out: dict[str, Any] = {"version": "1", "route_to": route_to, "matched_rule": rule}
    out |= {"default_used": not rule, "outputs": outputs}
    if trace is not None:
        steps = trace.split()
        out["trace"] = [{"condition": s[:-1], "result": s[-1] == "+"} for s in steps]
    return out


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
]
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
PICTURE = [{"type": "text", "text": "what is in this image?"}, IMAGE]
INPUT_IMAGE = [
    {"type": "input_text", "text": "describe this picture"},
    {"type": "input_image", "image_url": "https://example.com/cat.png"},
]
TRACE = {"route_trace": True}
META = {"task_class": "chitchat", "consent": "granted"}

CHAR_BOUNDS = routing(
    "local",
    ("min_chars-rule", {"min_chars": 10}, "cloud"),
    ("max_chars-rule", {"max_chars": 6}, "cloud"),
)
FEATURES = routing(
    "local",
    ("has_tools-rule", {"has_tools": True}, "cloud"),
    ("has_images-rule", {"has_images": True}, "cloud"),
)
NEGATED = routing("local", ("no-tools-rule", {"has_tools": False}, "cloud"))
SENSITIVE = [
    {"metadata": {"key": "task_class", "any": ["payment", "checkout"]}},
    {"metadata": {"key": "consent", "equals": "denied"}},
]
METADATA = routing(
    "cloud",
    ("sensitive-task-stays-local", {"any": SENSITIVE}, "local"),
    ("no-consent-recorded-stays-local", {"metadata": {"key": "consent", "exists": False}}, "local"),
    ("region-recorded-stays-local", {"metadata": {"key": "region", "exists": True}}, "local"),
    ("blank-equals-never-matches", {"metadata": {"key": "note", "equals": ""}}, "local"),
)
KILO = {"not": {"keywords_any": ["kilo"]}}
VOCAB = routing(
    "local",
    ("keywords_any-rule", {"keywords_any": ["alpha"]}, "cloud"),
    ("keywords_all-rule", {"keywords_all": ["charlie", "delta"]}, "cloud"),
    ("regex-rule", {"regex": "echo-[0-9]+"}, "cloud"),
    ("any-rule", {"any": [{"keywords_any": ["foxtrot"]}, {"keywords_any": ["golf"]}]}, "cloud"),
    ("all-rule", {"all": [{"keywords_any": ["hotel"]}, {"keywords_any": ["india"]}]}, "cloud"),
    ("not-rule", {"all": [{"keywords_any": ["juliett"]}, KILO]}, "cloud"),
    ("implicit-all-rule", {"keywords_any": ["lima"], "max_chars": 1000}, "cloud"),
    ("unicode-keyword-rule", {"keywords_any": ["café"]}, "cloud"),
)
INPUT_FORMS = routing(
    "local",
    ("escalate-rule", {"keywords_any": ["escalate"]}, "cloud"),
    ("alpha-omega-rule", {"keywords_all": ["alpha", "omega"]}, "cloud"),
)
NESTED: dict[str, Any] = {
    "category": "support",
    "priority": 1,
    "metadata": {"team": "tier2", "tags": ["urgent", "billing"]},
}
OUTPUTS = routing("local", ("nested-outputs-rule", {"keywords_any": ["escalate"]}, "cloud"))
OUTPUTS["rules"][0]["outputs"] = NESTED
RESOLUTION = routing(
    "local",
    ("first-rule", {"keywords_any": ["shared", "only1"]}, "cloud"),
    ("second-rule", {"keywords_any": ["shared", "only2"]}, "edge"),
)
TRACED = routing(
    "local",
    ("any-rule", {"any": [{"keywords_any": ["alpha"]}, {"regex": "bravo"}]}, "cloud"),
    ("all-rule", {"all": [{"keywords_any": ["charlie"]}, {"not": {"max_chars": 5}}]}, "cloud"),
)
ESCALATE = "please escalate this request"

CASES: dict[str, list[tuple[str, dict[str, Any], Any]]] = {
    "l1_conditions_char_bounds": [
        ("min_chars-inclusive-boundary", chat("0123456789"), decision("cloud", "min_chars-rule")),
        ("max_chars-inclusive-boundary", chat("012345"), decision("cloud", "max_chars-rule")),
        ("between-bounds-default", chat("0123456"), decision("local")),
        ("max_chars-utf8-byte-count", chat("éééé"), decision("local")),
        (
            "min_chars-trace",
            chat("0123456789", **TRACE),
            decision("cloud", "min_chars-rule", "min_chars+"),
        ),
        (
            "max_chars-trace",
            chat("012345", **TRACE),
            decision("cloud", "max_chars-rule", "min_chars- max_chars+"),
        ),
    ],
    "l1_conditions_features": [
        (
            "has_tools-present-matches",
            chat("book me a flight", tools=TOOLS),
            decision("cloud", "has_tools-rule"),
        ),
        ("has_tools-absent-no-match", chat("a plain prompt carrying no tools"), decision("local")),
        (
            "has_tools-empty-array-no-match",
            chat("a prompt with an empty tools list", tools=[]),
            decision("local"),
        ),
        ("has_images-present-matches", chat(PICTURE), decision("cloud", "has_images-rule")),
        (
            "has_images-absent-no-match",
            chat("a plain prompt carrying no images"),
            decision("local"),
        ),
        (
            "has_images-input-image-part",
            {"input": [{"role": "user", "content": INPUT_IMAGE}]},
            decision("cloud", "has_images-rule"),
        ),
        (
            "has_images-input-bare-image-part",
            {"input": INPUT_IMAGE},
            decision("cloud", "has_images-rule"),
        ),
        (
            "has_images-earlier-turn-still-counts",
            {
                "messages": [
                    {"role": "user", "content": PICTURE},
                    {"role": "user", "content": "follow-up question with no image"},
                ]
            },
            decision("cloud", "has_images-rule"),
        ),
        (
            "has_tools-trace",
            chat("book me a flight", tools=TOOLS, **TRACE),
            decision("cloud", "has_tools-rule", "has_tools+"),
        ),
        (
            "has_images-trace",
            chat(PICTURE, **TRACE),
            decision("cloud", "has_images-rule", "has_tools- has_images+"),
        ),
    ],
    "l1_conditions_features_negated": [
        (
            "has_tools-false-matches-absent",
            chat("a plain prompt with no tools"),
            decision("cloud", "no-tools-rule"),
        ),
        (
            "has_tools-false-no-match-when-present",
            chat("use a tool please", tools=TOOLS),
            decision("local"),
        ),
    ],
    "l1_conditions_metadata": [
        (
            "metadata-any",
            chat("how do I return this order?", metadata={**META, "task_class": "payment"}),
            decision("local", "sensitive-task-stays-local"),
        ),
        (
            "metadata-equals",
            chat("summarize this", metadata={**META, "consent": "denied"}),
            decision("local", "sensitive-task-stays-local"),
        ),
        (
            "metadata-equals-no-match",
            chat("summarize this", metadata={**META, "consent": "denieddd"}),
            decision("cloud"),
        ),
        (
            "metadata-exists-false",
            chat("summarize this", metadata={"task_class": "chitchat"}),
            decision("local", "no-consent-recorded-stays-local"),
        ),
        (
            "metadata-whitespace-counts-absent",
            chat("summarize this", metadata={**META, "consent": " "}),
            decision("local", "no-consent-recorded-stays-local"),
        ),
        (
            "metadata-any-comma-separated",
            chat("process this", metadata={**META, "task_class": "billing, payment"}),
            decision("local", "sensitive-task-stays-local"),
        ),
        (
            "metadata-equals-case-sensitive",
            chat("summarize this", metadata={**META, "consent": "DENIED"}),
            decision("cloud"),
        ),
        (
            "metadata-exists-true",
            chat("summarize this", metadata={**META, "region": "eu-west"}),
            decision("local", "region-recorded-stays-local"),
        ),
        (
            "metadata-trace",
            chat(
                "how do I return this order?", metadata={**META, "task_class": "payment"}, **TRACE
            ),
            decision("local", "sensitive-task-stays-local", "metadata+"),
        ),
        (
            "metadata-equals-blank-never-matches",
            chat("summarize this", metadata={"note": "", "consent": "granted"}),
            decision("cloud"),
        ),
    ],
    "l1_conditions_vocab": [
        (
            "keywords_any-substring",
            chat("alphabet soup for lunch"),
            decision("cloud", "keywords_any-rule"),
        ),
        (
            "keywords_any-case-fold",
            chat("ALPHA release notes"),
            decision("cloud", "keywords_any-rule"),
        ),
        (
            "keywords_any-non-ascii-match",
            chat("a café au lait please"),
            decision("cloud", "unicode-keyword-rule"),
        ),
        ("keywords_any-non-ascii-no-case-fold", chat("CAFÉ AU LAIT"), decision("local")),
        (
            "keywords_all-both-present",
            chat("charlie and delta together"),
            decision("cloud", "keywords_all-rule"),
        ),
        ("keywords_all-one-missing-no-match", chat("charlie by itself"), decision("local")),
        ("regex-matches-substring", chat("deploy echo-42 now"), decision("cloud", "regex-rule")),
        ("regex-no-match", chat("deploy echo-x now"), decision("local")),
        ("any-one-child-matches", chat("practising my golf swing"), decision("cloud", "any-rule")),
        ("any-no-child-matches", chat("practising my tennis serve"), decision("local")),
        ("all-both-children-match", chat("hotel in india"), decision("cloud", "all-rule")),
        ("all-one-child-no-match", chat("hotel by the beach"), decision("local")),
        ("not-child-absent-matches", chat("juliett is here"), decision("cloud", "not-rule")),
        ("not-child-present-no-match", chat("juliett and kilo"), decision("local")),
        ("implicit-all-both-keys", chat("lima is ready"), decision("cloud", "implicit-all-rule")),
        ("implicit-all-one-key-no-match", chat("lima" + " padding" * 130), decision("local")),
        ("regex-case-sensitive-no-match", chat("deploy ECHO-42 now"), decision("local")),
        (
            "keywords_any-trace",
            chat("alpha release notes", **TRACE),
            decision("cloud", "keywords_any-rule", "keywords_any+"),
        ),
        (
            "keywords_all-trace",
            chat("charlie and delta together", **TRACE),
            decision("cloud", "keywords_all-rule", "keywords_any- keywords_all+"),
        ),
        (
            "regex-trace",
            chat("deploy echo-42 now", **TRACE),
            decision("cloud", "regex-rule", "keywords_any- keywords_all- regex+"),
        ),
    ],
    "l1_input_forms": [
        ("prompt-string-form", {"prompt": ESCALATE}, decision("cloud", "escalate-rule")),
        (
            "prompt-array-form",
            {"prompt": ["alpha at the start", "omega at the end"]},
            decision("cloud", "alpha-omega-rule"),
        ),
        (
            "prompt-array-skips-non-string-parts",
            {"prompt": ["alpha here", {"escalate": "now"}, "omega there"]},
            decision("cloud", "alpha-omega-rule"),
        ),
        ("input-string-form", {"input": ESCALATE}, decision("cloud", "escalate-rule")),
        (
            "input-array-role-tagged",
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": ESCALATE}]}]},
            decision("cloud", "escalate-rule"),
        ),
        (
            "input-roleless-fallback",
            {"input": ["alpha at the start", "omega at the end"]},
            decision("cloud", "alpha-omega-rule"),
        ),
    ],
    "l1_outputs": [
        (
            "nested-outputs-verbatim",
            chat("please escalate this ticket"),
            decision("cloud", "nested-outputs-rule", **NESTED),
        ),
    ],
    "l1_resolution": [
        ("first-match-wins", chat("a shared concern"), decision("cloud", "first-rule")),
        (
            "later-rule-when-earlier-misses",
            chat("handles only2 here"),
            decision("edge", "second-rule"),
        ),
        ("fail-open-to-default", chat("nothing relevant here"), decision("local")),
    ],
    "l1_trace": [
        ("trace-omitted-when-not-requested", chat("alpha"), decision("cloud", "any-rule")),
        (
            "trace-omitted-when-explicitly-false",
            chat("alpha", route_trace=False),
            decision("cloud", "any-rule"),
        ),
        (
            "trace-any-short-circuits-on-first-true",
            chat("alpha", **TRACE),
            decision("cloud", "any-rule", "keywords_any+"),
        ),
        (
            "trace-accumulates-across-missed-rule",
            chat("charlie please", **TRACE),
            decision("cloud", "all-rule", "keywords_any- regex- keywords_any+ max_chars-"),
        ),
        (
            "trace-all-short-circuits-and-default-carries-trace",
            chat("zulu", **TRACE),
            decision("local", "", "keywords_any- regex- keywords_any-"),
        ),
    ],
}


GROUPS = {
    "l1_conditions_char_bounds": CHAR_BOUNDS,
    "l1_conditions_features": FEATURES,
    "l1_conditions_features_negated": NEGATED,
    "l1_conditions_metadata": METADATA,
    "l1_conditions_vocab": VOCAB,
    "l1_input_forms": INPUT_FORMS,
    "l1_outputs": OUTPUTS,
    "l1_resolution": RESOLUTION,
    "l1_trace": TRACED,
}
CORPUS = [
    (group, name, request, expected)
    for group, cases in CASES.items()
    for name, request, expected in cases
]


@pytest.mark.parametrize(
    ("routing_block", "request_body", "expected"),
    [(GROUPS[group], request, expected) for group, _, request, expected in CORPUS],
    ids=[f"{group}/{name}" for group, name, _, _ in CORPUS],
)
def test_lemonades_conformance_corpus(
    routing_block: dict[str, Any], request_body: dict[str, Any], expected: dict[str, Any]
) -> None:
    """Every field of the Decision, as the corpus runner compares it."""
    body = {"model": "user.Policy", **request_body}
    policy = parse_route_policy(
        {
            "version": "1",
            "recipe": "collection.router",
            "components": routing_block["candidates"],
            "routing": routing_block,
        }
    )
    made = decide_route(policy, features_from_body(body), trace=trace_requested(body))
    assert made.to_json() == expected
