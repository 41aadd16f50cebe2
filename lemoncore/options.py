"""Option precedence for a load, as one pure function.

Highest first: request > per-model saved options > catalogue ``recipe_options`` >
the recipe's section of the user's configuration > the recipe's declared defaults.
A ``None`` in a higher layer means "not set here", never "unset".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def resolve_options(*layers_lowest_first: Mapping[str, Any]) -> dict[str, Any]:
    resolved: dict[str, Any] = {}
    for layer in layers_lowest_first:
        resolved.update({k: v for k, v in layer.items() if v is not None})
    return resolved
