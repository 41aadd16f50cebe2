"""Lemonade's routing match expressions: the classifiers and conditions a rule's
``match`` is made of, checked as ``parse_match_expr``/``validate_leaf`` do
(src/cpp/server/routing_policy_parser.cpp) and compiled as ``compile_match_expr``,
``make_leaf_factory`` and ``make_deterministic_leaf_factories`` do
(src/cpp/server/routing_policy.cpp), lemonade-sdk/lemonade @e385039. Pure: no I/O.

A refusal is a :class:`PolicyError` with Lemonade's message; checks walk an object's keys
in sorted order, as an nlohmann object iterates. A multi-key leaf is an implicit ``all`` of
its ops, the classifier band first, then the ops in :data:`LEAF_OPS` order (a
``std::map``'s). Bounds Lemonade leaves to its body limit are lemoncore's own:
:data:`MAX_NODES`, :data:`MAX_KEYWORDS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

import regex

from lemoncore.routing.regex import compile_regex

MAX_MATCH_DEPTH = 64  # kMaxMatchExprDepth, routing_policy.h
MAX_NODES = 8192  # lemoncore's bound: match nodes (leaves and any/all/not) in one policy
MAX_KEYWORDS = 4096  # lemoncore's bound: keywords_any/keywords_all items in one policy
MATCH_KEYS = frozenset(
    {"any", "all", "not", "classifier", "label", "min_score", "max_score", "keywords_any"}
    | {"keywords_all", "regex", "min_chars", "max_chars", "has_tools", "has_images", "metadata"}
)
METADATA_KEYS = frozenset({"key", "equals", "any", "exists"})
# make_leaf_factory walks a std::map: deterministic ops of one leaf run in this order.
LEAF_OPS = (
    *("has_images", "has_tools", "keywords_all", "keywords_any"),
    *("max_chars", "metadata", "min_chars", "regex"),
)
LONG_LONG_MAX = 2**63 - 1

OnError: TypeAlias = Literal["match_true", "match_false"]


class PolicyError(ValueError):
    """A document Lemonade's parser or engine refuses; the message is Lemonade's."""


@dataclass(frozen=True, slots=True)
class Classifier:
    """A declared classifier (``make_classifier``). lemoncore runs none of them: see
    :func:`lemoncore.routing.decision.decide_route`."""

    id: str
    type: str  # "classifier", "semantic_similarity" or "llm"
    model: str
    on_error: OnError
    labels: tuple[str, ...]
    default_label: str | None
    prompt: str = ""
    reference_phrases: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ClassifierBand:
    """``{"classifier": id, "label"?, "min_score"?, "max_score"?}``: an inclusive band,
    ``min_score`` 0.5 when neither bound is given (``ClassifierBandCondition``)."""

    classifier: Classifier
    label: str | None
    min_score: float | None
    max_score: float | None


@dataclass(frozen=True, slots=True)
class Keywords:
    """``keywords_any``/``keywords_all``: ASCII-folded substrings (``KeywordsCondition``)."""

    keywords: tuple[str, ...]  # ASCII-lowered
    require_all: bool


@dataclass(frozen=True, slots=True)
class Regex:
    """``regex``: searched anywhere in the input (``RegexCondition``)."""

    pattern: str
    compiled: regex.Pattern[bytes]


@dataclass(frozen=True, slots=True)
class Chars:
    """``min_chars`` (``>=``) / ``max_chars`` (``<=``) over UTF-8 bytes (``CharsCondition``)."""

    threshold: int
    op: Literal["min_chars", "max_chars"]


@dataclass(frozen=True, slots=True)
class Feature:
    """``has_tools``/``has_images``: the request feature equals ``expected``."""

    op: Literal["has_tools", "has_images"]
    expected: bool


@dataclass(frozen=True, slots=True)
class MetadataMatch:
    """``metadata``: exactly one of ``equals``, ``any``, ``exists`` (``MetadataCondition``)."""

    key: str
    equals: str | None = None
    any: frozenset[str] | None = None
    exists: bool | None = None


@dataclass(frozen=True, slots=True)
class All:
    children: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    children: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Not:
    child: Condition


Condition: TypeAlias = (
    "ClassifierBand | Keywords | Regex | Chars | Feature | MetadataMatch | All | AnyOf | Not"
)


# JSON helpers (nlohmann's is_number excludes booleans; Python's bool is an int) ---------


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_type(value: object) -> str:
    """nlohmann's name for a JSON value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else "number"


def json_object(value: object, path: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise PolicyError(f"{path} must be an object")
    return value


def known(value: object, accepted: frozenset[str], path: str) -> dict[str, object]:
    obj = json_object(value, path)
    for key in sorted(obj):
        if key not in accepted:
            raise PolicyError(f"{path} contains unknown key '{key}'")
    return obj


def required(obj: Mapping[str, object], key: str, path: str) -> object:
    if key not in obj:
        raise PolicyError(f"{path} is missing required key '{key}'")
    return obj[key]


def required_string(obj: Mapping[str, object], key: str, path: str) -> str:
    value = required(obj, key, path)
    if not isinstance(value, str) or not value:
        raise PolicyError(f"{path}.{key} must be a non-empty string")
    return value


def optional_string(obj: Mapping[str, object], key: str, path: str) -> str:
    return required_string(obj, key, path) if key in obj else ""


def string_array(value: object, path: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise PolicyError(f"{path} must be a non-empty array")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise PolicyError(f"{path}[{i}] must be a non-empty string")
    return value


def check_match(expr: object, classifiers: Mapping[str, Classifier], path: str, depth: int) -> None:
    """``parse_match_expr``: one logical operator alone, or a leaf."""
    if depth > MAX_MATCH_DEPTH:
        raise PolicyError(f"{path} exceeds maximum match expression depth")
    node = known(expr, MATCH_KEYS, path)
    logical = [k for k in ("any", "all", "not") if k in node]
    if len(logical) > 1:
        raise PolicyError(f"{path} must contain only one logical operator")
    if not logical:
        _check_leaf(node, classifiers, path)
        return
    if len(node) != 1:
        raise PolicyError(f"{path} cannot mix logical operators with leaf conditions")
    key = logical[0]
    if key == "not":
        check_match(node["not"], classifiers, f"{path}.not", depth + 1)
        return
    children = node[key]
    if not isinstance(children, list) or not children:
        raise PolicyError(f"{path}.{key} must be a non-empty array")
    for i, child in enumerate(children):
        check_match(child, classifiers, f"{path}.{key}[{i}]", depth + 1)


def _check_leaf(
    leaf: Mapping[str, object], classifiers: Mapping[str, Classifier], path: str
) -> None:
    """``validate_leaf``."""
    count = 0
    if "classifier" in leaf:
        count += 1
        cid = required_string(leaf, "classifier", path)
        if cid not in classifiers:
            raise PolicyError(f"{path}.classifier references unknown classifier '{cid}'")
        labels = classifiers[cid].labels
        if "label" in leaf:
            label = optional_string(leaf, "label", path)
            if label not in labels:
                raise PolicyError(
                    f"{path}.label references unknown label '{label}' on classifier '{cid}'"
                )
        elif labels and classifiers[cid].default_label is None:
            raise PolicyError(f"{path} omits label but classifier '{cid}' has no default_label")
        low, high = _bound(leaf, "min_score", path), _bound(leaf, "max_score", path)
        if low is not None and high is not None and low > high:
            raise PolicyError(f"{path} has min_score greater than max_score")
    else:
        for key in ("label", "min_score", "max_score"):
            if key in leaf:
                raise PolicyError(f"{path}.{key} requires a classifier condition")
    for op in ("keywords_any", "keywords_all"):
        if op in leaf:
            count += 1
            string_array(leaf[op], f"{path}.{op}")
    if "regex" in leaf:
        count += 1
        if not isinstance(leaf["regex"], str) or not leaf["regex"]:
            raise PolicyError(f"{path}.regex must be a non-empty string")
    for op in ("min_chars", "max_chars"):
        if op in leaf:
            count += 1
            value = leaf[op]
            if not (isinstance(value, int) and not isinstance(value, bool)) or not (
                0 <= value <= LONG_LONG_MAX
            ):
                raise PolicyError(f"{path}.{op} must be a non-negative integer")
    for op in ("has_tools", "has_images"):
        if op in leaf:
            count += 1
            if not isinstance(leaf[op], bool):
                raise PolicyError(f"{path}.{op} must be a boolean")
    if "metadata" in leaf:
        count += 1
        _check_metadata(leaf["metadata"], f"{path}.metadata")
    if count == 0:
        raise PolicyError(f"{path} must contain at least one leaf condition")


def _bound(leaf: Mapping[str, object], key: str, path: str) -> float | None:
    if key not in leaf:
        return None
    value = leaf[key]
    if not is_number(value):
        raise PolicyError(f"{path}.{key} must be numeric")
    assert isinstance(value, int | float)
    if not 0.0 <= value <= 1.0:
        raise PolicyError(f"{path}.{key} must be in [0, 1]")
    return float(value)


def _check_metadata(spec: object, path: str) -> None:
    """``validate_metadata_match``."""
    node = known(spec, METADATA_KEYS, path)
    required_string(node, "key", path)
    if sum(k in node for k in ("equals", "any", "exists")) != 1:
        raise PolicyError(f"{path} must contain exactly one comparator: equals, any, or exists")
    if "equals" in node and not isinstance(node["equals"], str):
        raise PolicyError(f"{path}.equals must be a string")
    if "any" in node:
        string_array(node["any"], f"{path}.any")
    if "exists" in node and not isinstance(node["exists"], bool):
        raise PolicyError(f"{path}.exists must be a boolean")


# The engine's compile step (routing_policy.cpp) -------------------------------------


class Compiler:
    """``compile_match_expr`` with ``make_leaf_factory``: checked raw JSON to conditions."""

    def __init__(self, classifiers: Mapping[str, Classifier]) -> None:
        self.classifiers = classifiers
        self.nodes = 0
        self.keywords = 0

    def expr(self, raw: object) -> Condition:
        assert isinstance(raw, dict)  # checked by check_match
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise PolicyError(f"routing.rules has more than {MAX_NODES} match conditions")
        if "not" in raw:
            return Not(self.expr(raw["not"]))
        for key, kind in (("any", AnyOf), ("all", All)):
            if key in raw:
                children = raw[key]
                assert isinstance(children, list)
                return kind(tuple(self.expr(c) for c in children))
        return self.leaf(raw)

    def leaf(self, raw: Mapping[str, object]) -> Condition:
        found: list[Condition] = []
        if "classifier" in raw:
            low, high = raw.get("min_score"), raw.get("max_score")
            label = raw.get("label")
            found.append(
                ClassifierBand(
                    self.classifiers[str(raw["classifier"])],
                    label if isinstance(label, str) else None,
                    0.5 if low is None and high is None else _float(low),
                    _float(high),
                )
            )
        for op in LEAF_OPS:
            if op in raw:
                found.append(self.op(op, raw[op]))
        return found[0] if len(found) == 1 else All(tuple(found))

    def op(self, op: str, value: object) -> Condition:
        if op in {"keywords_any", "keywords_all"}:
            assert isinstance(value, list)
            self.keywords += len(value)
            if self.keywords > MAX_KEYWORDS:
                raise PolicyError(f"routing.rules has more than {MAX_KEYWORDS} keywords")
            return Keywords(tuple(ascii_lower(str(k)) for k in value), op == "keywords_all")
        if op == "regex":
            try:
                return Regex(str(value), compile_regex(str(value)))
            except ValueError as exc:
                raise PolicyError(str(exc)) from None
        if op in {"min_chars", "max_chars"}:
            assert isinstance(value, int)
            return Chars(value, "min_chars" if op == "min_chars" else "max_chars")
        if op in {"has_tools", "has_images"}:
            return Feature("has_tools" if op == "has_tools" else "has_images", value is True)
        spec = value
        assert isinstance(spec, dict)
        tokens = spec.get("any")
        return MetadataMatch(
            str(spec["key"]),
            equals=str(spec["equals"]) if "equals" in spec else None,
            any=frozenset(str(t) for t in tokens) if isinstance(tokens, list) else None,
            exists=bool(spec["exists"]) if "exists" in spec else None,
        )


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """``ascii_lower``: only A-Z fold (frozen v1: locale-independent, no Unicode fold)."""
    return text.translate(_ASCII_LOWER)
