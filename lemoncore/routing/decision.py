"""Lemonade's routing decision over a parsed policy, and the request features it reads:
``RoutingPolicyEngine::route`` and the condition classes of src/cpp/server/routing_policy.cpp,
``route_decision_to_json`` in route_decision_response.cpp, ``build_route_context`` in
routing_classifier_services.cpp (lemonade-sdk/lemonade @e385039). Pure: no I/O.

Contract: :func:`decide_route` walks the rules in order, first match wins, and falls open to
``default_model``; each evaluated leaf appends one :class:`TraceEntry` (``any`` stops at
its first true child, ``all`` at its first false one). Classifiers are not run here:
lemoncore has no classifier services, so a classifier whose score is not passed in
``scores`` counts as failed (``Score::ok`` false), as Lemonade's does when its backend
cannot answer, and its band takes the classifier's ``on_error`` (``match_false`` unless
authored ``match_true``). An ``llm`` router thus fails open to ``default_model``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from lemoncore.routing.conditions import (
    All,
    AnyOf,
    Chars,
    ClassifierBand,
    Condition,
    Feature,
    Keywords,
    MetadataMatch,
    Not,
    Regex,
    ascii_lower,
)
from lemoncore.routing.policy import RoutePolicy

REGEX_MAX_INPUT = 1 << 20  # kRegexMaxInputBytes: a longer input is a regex non-match
# lemoncore's bound, not Lemonade's: all of one decision's regex searches together; a
# search still running when it is spent is a non-match (``regex``'s timeout), as an input
# over REGEX_MAX_INPUT is, so no policy can hold a request (or the server) longer.
REGEX_BUDGET_S = 0.25
_WS = " \t\r\n"


def utf8(text: str) -> bytes:
    """``text`` as UTF-8 (a lone surrogate, which JSON can carry, as its 3 bytes)."""
    return text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class RouteFeatures:
    """``RouteContext``: what conditions read. ``chars`` is the UTF-8 byte count of
    ``text`` (frozen v1 unit of ``min_chars``/``max_chars``)."""

    text: str = ""
    has_tools: bool = False
    has_images: bool = False
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def chars(self) -> int:
        return len(utf8(self.text))


@dataclass(frozen=True, slots=True)
class Score:
    """A classifier's answer (``Score``): label -> score in [0, 1]; ``ok`` false when it
    failed to evaluate."""

    labels: Mapping[str, float] = field(default_factory=dict)
    ok: bool = True
    rationale: str = ""


FAILED = Score(ok=False)


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One evaluated leaf (``TraceEntry``): ``classifier:<id>`` or the op's name."""

    condition: str
    result: bool
    score: float | None = None
    label: str = ""
    rationale: str = ""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"condition": self.condition, "result": self.result}
        if self.score is not None:
            out["score"] = self.score
        if self.label:
            out["label"] = self.label
        if self.rationale:
            out["rationale"] = self.rationale
        return out


@dataclass(frozen=True, slots=True)
class Decision:
    """The engine's output (``Decision``); ``matched_rule`` is empty when defaulted."""

    route_to: str
    matched_rule: str = ""
    default_used: bool = False
    outputs: Mapping[str, object] = field(default_factory=dict)
    trace: tuple[TraceEntry, ...] = ()

    def to_json(self) -> dict[str, object]:
        """``route_decision_to_json``: ``trace`` only when it has entries."""
        out: dict[str, object] = {
            "version": "1",
            "route_to": self.route_to,
            "matched_rule": self.matched_rule,
            "default_used": self.default_used,
            "outputs": dict(self.outputs),
        }
        if self.trace:
            out["trace"] = [entry.to_json() for entry in self.trace]
        return out


class _Evaluation:
    """``EvalContext``: one request's memo (folded text, bytes) and trace."""

    def __init__(self, features: RouteFeatures, scores: Mapping[str, Score]) -> None:
        self.features = features
        self.scores = scores
        self.trace: list[TraceEntry] = []
        self._lowered: str | None = None
        self._bytes: bytes | None = None
        self._regex_until = time.monotonic() + REGEX_BUDGET_S

    @property
    def lowered(self) -> str:
        if self._lowered is None:
            self._lowered = ascii_lower(self.features.text)
        return self._lowered

    @property
    def data(self) -> bytes:
        if self._bytes is None:
            self._bytes = utf8(self.features.text)
        return self._bytes

    def searched(self, cond: Regex) -> bool:
        """Whether ``cond`` matches, within what is left of the regex budget."""
        left = self._regex_until - time.monotonic()
        if len(self.data) > REGEX_MAX_INPUT or left <= 0:
            return False
        try:
            return cond.compiled.search(self.data, timeout=left, concurrent=True) is not None
        except TimeoutError:
            return False

    def leaf(self, name: str, result: bool) -> bool:
        self.trace.append(TraceEntry(name, result))
        return result

    def test(self, cond: Condition) -> bool:
        if isinstance(cond, All):
            return all(self.test(c) for c in cond.children)
        if isinstance(cond, AnyOf):
            return any(self.test(c) for c in cond.children)
        if isinstance(cond, Not):
            return not self.test(cond.child)
        if isinstance(cond, Keywords):
            text = self.lowered
            hit = all if cond.require_all else any
            name = "keywords_all" if cond.require_all else "keywords_any"
            return self.leaf(name, hit(k in text for k in cond.keywords))
        if isinstance(cond, Regex):
            return self.leaf("regex", self.searched(cond))
        if isinstance(cond, Chars):
            n = len(self.data)
            ok = n >= cond.threshold if cond.op == "min_chars" else n <= cond.threshold
            return self.leaf(cond.op, ok)
        if isinstance(cond, Feature):
            f = self.features
            actual = f.has_tools if cond.op == "has_tools" else f.has_images
            return self.leaf(cond.op, actual == cond.expected)
        if isinstance(cond, MetadataMatch):
            return self.leaf("metadata", metadata_matches(cond, self.features.metadata))
        return self.band(cond)

    def band(self, cond: ClassifierBand) -> bool:
        """``ClassifierBandCondition::evaluate``."""
        classifier = cond.classifier
        score = self.scores.get(classifier.id, FAILED)
        value: float | None = None
        if not score.ok:
            result = classifier.on_error == "match_true"
        else:
            label = cond.label or classifier.default_label
            if label is not None:
                value = score.labels.get(label, 0.0)
            else:  # Score::primary: the lone label's score, else 0
                value = next(iter(score.labels.values())) if len(score.labels) == 1 else 0.0
            low, high = cond.min_score, cond.max_score
            result = (low is None or value >= low) and (high is None or value <= high)
        applies = cond.label is None or cond.label in score.labels
        rationale = score.rationale if score.ok and applies else ""
        entry = TraceEntry(
            f"classifier:{classifier.id}", result, value, cond.label or "", rationale
        )
        self.trace.append(entry)
        return result


def metadata_matches(cond: MetadataMatch, metadata: Mapping[str, str]) -> bool:
    """``MetadataCondition::evaluate``: case-sensitive; a missing, empty or
    whitespace-only value is absent; ``any`` meets the comma-split, trimmed tokens."""
    value = metadata.get(cond.key)
    present = value is not None and value.strip(_WS) != ""
    if cond.exists is not None:
        return present == cond.exists
    if not present or value is None:
        return False
    if cond.equals is not None:
        return value == cond.equals
    tokens = {t.strip(_WS) for t in value.split(",")} - {""}
    return bool(cond.any and tokens & cond.any)


def decide_route(
    policy: RoutePolicy,
    features: RouteFeatures,
    *,
    trace: bool = True,
    scores: Mapping[str, Score] | None = None,
) -> Decision:
    """``RoutingPolicyEngine::route``: the first rule whose match holds, else
    ``default_model`` with ``default_used``; the trace is kept when ``trace``.

    ``scores``: classifier id -> its precomputed :class:`Score`; absent ids failed.
    """
    run = _Evaluation(features, scores or {})
    for rule in policy.rules:
        if run.test(rule.match):
            kept = tuple(run.trace) if trace else ()
            return Decision(rule.route_to, rule.id, False, rule.outputs, kept)
    return Decision(policy.default_model, "", True, {}, tuple(run.trace) if trace else ())


# Request features (build_route_context, routing_classifier_services.cpp) -------------


def content_text(content: object) -> str:
    """``collect_text_from_content``: a string, or the ``text``/``input_text`` parts of an
    array joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        p["text"]
        for p in content
        if isinstance(p, dict) and p.get("type") in {"text", "input_text"}
        if isinstance(p.get("text"), str)
    )


def content_has_image(content: object) -> bool:
    """``content_has_image``: an ``image_url`` or ``input_image`` part in an array."""
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") in {"image_url", "input_image"} for p in content
    )


def _is_user(item: object) -> bool:
    return isinstance(item, dict) and item.get("role") == "user" and "content" in item


def features_from_body(body: Mapping[str, object]) -> RouteFeatures:
    """``build_route_context`` over a chat/completions (``messages``), completions
    (``prompt``) or Responses (``input``) body: the text is the last user turn (or the
    prompt / input text), ``has_images`` scans every turn, ``has_tools`` is a non-empty
    ``tools`` array, ``metadata`` keeps its string values. Where Lemonade's JSON lookups
    would throw on a non-string ``role`` or ``type`` (and so not route), they read here as
    absent."""
    tools = body.get("tools")
    has_tools = isinstance(tools, list) and bool(tools)
    has_images = False
    lines: list[str] = []  # append_line: text joined by newlines, empty lines dropped
    text = ""
    messages, prompt, given = body.get("messages"), body.get("prompt"), body.get("input")
    if isinstance(messages, list):
        has_images = any(
            isinstance(m, dict) and content_has_image(m.get("content")) for m in messages
        )
        user = next((m for m in reversed(messages) if _is_user(m)), None)
        text = content_text(user["content"]) if isinstance(user, dict) else ""
    elif "prompt" in body:
        if isinstance(prompt, str):
            text = prompt
        elif isinstance(prompt, list):
            lines = [p for p in prompt if isinstance(p, str)]
    elif isinstance(given, str):
        text = given
    elif isinstance(given, list):
        has_images = any(
            isinstance(i, dict) and content_has_image(i["content"] if "content" in i else [i])
            for i in given
        )
        user = next((i for i in reversed(given) if _is_user(i)), None)
        if isinstance(user, dict):
            text = content_text(user["content"])
        else:
            for item in given:
                if isinstance(item, str):
                    lines.append(item)
                elif isinstance(item, dict) and "role" not in item:
                    part = content_text(item["content"] if "content" in item else [item])
                    lines += [part] if part else []
    if lines:
        text = _append_lines(lines)
    raw = body.get("metadata")
    metadata = {k: v for k, v in raw.items() if isinstance(v, str)} if isinstance(raw, dict) else {}
    return RouteFeatures(text, has_tools, has_images, metadata)


def _append_lines(parts: list[str]) -> str:
    """Lemonade's ``append_line``: a newline before a part only once text exists."""
    text = ""
    for part in parts:
        if text:
            text += "\n"
        text += part
    return text


def trace_requested(body: Mapping[str, object]) -> bool:
    """``route_trace``: true only when the body says ``true``."""
    return body.get("route_trace") is True
