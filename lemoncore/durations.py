"""``keep_alive`` durations, as Ollama and llama-swap users write them."""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def keep_alive_seconds(value: object) -> float | None:
    """``keep_alive`` in seconds: a number of seconds or a Go duration (``"5m"``,
    ``"1h30m"``, ``"0"``); negative means forever (``math.inf``); ``None`` when absent.
    Anything else is a ``ValueError`` that says what to write."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, float | int | str):
        raise ValueError("keep_alive must be a number of seconds or a duration string")
    if isinstance(value, float | int):
        seconds = float(value)
    else:
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        try:
            seconds = sign * float(body)
        except ValueError:
            parts = _PART.findall(body)
            if not parts or "".join(n + u for n, u in parts) != body:
                raise ValueError(
                    f"{value!r} is not a duration: give seconds (300) or a "
                    "duration such as '5m' or '1h'"
                ) from None
            seconds = sign * sum(float(n) * _UNITS[u] for n, u in parts)
    if math.isnan(seconds):
        raise ValueError("keep_alive must be a number of seconds or a duration string")
    return math.inf if seconds < 0 else seconds


KeepAlive = Annotated[float, BeforeValidator(keep_alive_seconds)]
"""A validated ``keep_alive``: seconds, ``math.inf`` for forever."""


def describe(seconds: float) -> str:
    """``seconds`` for people: ``forever``, ``0 s``, ``90 s``, ``5 min``, ``2 h``."""
    if math.isinf(seconds):
        return "forever"
    if seconds < 120 or seconds % 60:
        return f"{seconds:g} s"
    return (
        f"{seconds / 3600:g} h"
        if seconds >= 7200 and not seconds % 3600
        else f"{seconds / 60:g} min"
    )
