"""The field checks both translators share: a client mistake is refused with a 400
``invalid_request_error`` naming the field (``param``), before anything reaches an engine,
so no engine answers it with a 5xx."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lemoncore.errors import LemonError


def refuse(message: str, param: str) -> LemonError:
    return LemonError(message, 400, param=param)


def integer(value: object) -> int | None:
    """``value`` as a JSON integer (``2.0`` is one), else ``None``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number_within(body: Mapping[str, Any], name: str, low: float, high: float) -> float | None:
    """``body[name]``, a number in ``[low, high]``; ``None`` when absent (or null)."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise refuse(f"{name} must be a number from {low:g} to {high:g}, not {value!r}", name)
    return value


def positive_integer(body: Mapping[str, Any], name: str) -> int | None:
    """``body[name]``, an integer of at least 1; ``None`` when absent (or null)."""
    if body.get(name) is None:
        return None
    if (value := integer(body[name])) is None or value < 1:
        raise refuse(f"{name} must be an integer of at least 1, not {body[name]!r}", name)
    return value


def name_of(value: object, param: str) -> str:
    """``value``, a non-empty string (a tool's or a call's name, a call id)."""
    if not isinstance(value, str) or not value:
        raise refuse(f"{param} must be a non-empty string, not {value!r}", param)
    return value
