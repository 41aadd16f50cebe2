"""Lemonade's ``regex`` routing op, compiled: ``reject_catastrophic_regex`` and the
``regex`` leaf factory of ``make_deterministic_leaf_factories`` in
src/cpp/server/routing_policy.cpp (lemonade-sdk/lemonade @e385039). Pure.

Lemonade builds ``std::regex`` (ECMAScript) over UTF-8 bytes; here a pattern is compiled by
the ``regex`` library in bytes mode (``\\d``, ``\\w``, ``.`` work on bytes as there), whose
searches take a timeout: the backtracking check refuses only nested quantifiers, and
``(a|aa)+$`` passes it, so a search's time is bounded by the caller's budget, not by the
pattern (:data:`lemoncore.routing.decision.REGEX_BUDGET_S`). Outside a
class ``$`` is made ``\\Z`` (ECMAScript's ``$`` is the end of input) and ``.`` excludes
``\\r`` as well as ``\\n`` (libstdc++'s ECMAScript ``.``); Python syntax ECMAScript lacks
(``(?P<…>``, ``(?<=``, inline flags, possessive ``a*+``) is refused. A refusal is a
:class:`ValueError` carrying Lemonade's message.
"""

from __future__ import annotations

import re

import regex

_BRACES = re.compile(r"\{\d+(?:,\d*)?\}")  # a {m}, {m,}, {m,n} quantifier


def reject_catastrophic_regex(pattern: str) -> None:
    """``reject_catastrophic_regex``, step for step: an unbounded quantifier on a group
    that holds one (``(a+)+``, ``(.*)+``, ``(\\d+){2,}``, ``((a+))+``) is refused."""
    stack: list[bool] = []  # per open group: holds an unbounded quantifier
    prev_closed = closed_unbounded = False
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i, prev_closed = i + 2, False
            continue
        if c == "[":
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            i, prev_closed = i + 1, False
            continue
        if c in "()":
            if c == "(":
                stack.append(False)
            else:
                closed_unbounded = stack.pop() if stack else False
                if closed_unbounded and stack:
                    stack[-1] = True
            i, prev_closed = i + 1, c == ")"
            continue
        unbounded = c in "*+"
        if c == "{":
            j = pattern.find("}", i + 1)
            j = n if j < 0 else j
            inner = pattern[i + 1 : j]
            comma = inner.find(",")
            unbounded = comma >= 0 and comma + 1 >= len(inner)
            i = j
        if unbounded:
            if prev_closed and closed_unbounded:
                raise ValueError(
                    "regex pattern is prone to catastrophic backtracking (nested unbounded "
                    "quantifier such as (X+)+); rewrite to avoid the nesting"
                )
            if stack:
                stack[-1] = True
        i, prev_closed = i + 1, False


def compile_regex(pattern: str) -> regex.Pattern[bytes]:
    """The ``regex`` leaf factory: non-empty, no nested unbounded quantifier, ECMAScript
    syntax (as this module's docstring says), compiled over UTF-8 bytes."""
    if not pattern:
        raise ValueError("regex pattern must be non-empty (an empty pattern matches everything)")
    reject_catastrophic_regex(pattern)
    out: list[str] = []
    i, in_class, after_quantifier = 0, False, False
    while i < len(pattern):
        c = piece = pattern[i]
        step, quantifier = 1, False
        if c == "\\":
            piece = pattern[i : i + 2]
            step = 2
        elif in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(" and pattern[i + 1 : i + 2] == "?" and pattern[i + 2 : i + 3] not in ":=!":
            bad = pattern[i : i + 3]
            raise ValueError(f"regex pattern is not valid ECMAScript: unsupported group '{bad}'")
        elif c == "$":
            piece = r"\Z"
        elif c == ".":
            piece = r"[^\n\r]"  # std::regex's ECMAScript '.': no line terminator
        elif c in "*+?" or (c == "{" and _BRACES.match(pattern, i)):
            if c == "+" and after_quantifier:  # Python's possessive a*+, not ECMAScript
                raise ValueError("regex pattern is not valid ECMAScript: possessive quantifier")
            braces = _BRACES.match(pattern, i) if c == "{" else None
            piece = braces.group() if braces else c
            step, quantifier = len(piece), True
        out.append(piece)
        i += step
        after_quantifier = quantifier
    try:
        return regex.compile("".join(out).encode("utf-8", "surrogatepass"))
    except (regex.error, OverflowError, RecursionError) as exc:
        raise ValueError(f"regex pattern is not valid ECMAScript: {exc}") from None
