"""A load's auto-eviction options (Lemonade's ``auto_evict``, ``evict_idle_timeout``,
``downsize_idle_timeout``, ``evict_weight_factor``: recipe options of every recipe there,
``get_keys_for_recipe`` in src/cpp/server/recipe_options.cpp), taken out of its option
layers before the recipe's own options are checked, and resolved over the global
defaults (:class:`~lemoncore.settings.EvictionSettings`). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lemoncore.options import Layer, OptionError
from lemoncore.serving.eviction import Residency
from lemoncore.settings import EvictionSettings

KEYS = ("auto_evict", "evict_idle_timeout", "downsize_idle_timeout", "evict_weight_factor")


def split(layers: Sequence[Layer]) -> tuple[tuple[Layer, ...], tuple[Layer, ...]]:
    """``layers`` without the auto-eviction options, and those options alone."""
    rest = tuple(
        Layer(layer.source, {k: v for k, v in layer.values.items() if k not in KEYS})
        for layer in layers
    )
    own = tuple(
        Layer(layer.source, {k: v for k, v in layer.values.items() if k in KEYS})
        for layer in layers
    )
    return rest, own


def resolve(defaults: EvictionSettings, layers: Sequence[Layer]) -> Residency:
    """The options the later layers set over ``defaults`` (``auto_evict`` stays ``None``
    unless a layer sets it: the global setting then applies when it is evaluated, so a
    change at run time reaches loaded models). A value of the wrong type is a 400
    naming the option and where it came from; ``null`` means unset, as in Lemonade."""
    values: dict[str, Any] = {
        "auto_evict": None,
        "evict_idle_timeout": defaults.evict_idle_timeout,
        "downsize_idle_timeout": defaults.downsize_idle_timeout,
        "evict_weight_factor": defaults.evict_weight_factor,
    }
    for layer in layers:
        for key, value in layer.values.items():
            if value is not None:
                values[key] = checked(key, value, layer.source)
    return Residency(**values)


def checked(key: str, value: object, source: str) -> bool | float:
    """``value`` for option ``key``: a boolean for ``auto_evict``, else a number not
    below zero (``evict_weight_factor``: above zero)."""
    if key == "auto_evict":
        if isinstance(value, bool):
            return value
        raise OptionError(f"option 'auto_evict' {source} must be a boolean", key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OptionError(f"option {key!r} {source} must be a number", key)
    if value < 0 or (key == "evict_weight_factor" and value == 0):
        bound = "above 0" if key == "evict_weight_factor" else "0 or more"
        raise OptionError(f"option {key!r} {source} must be {bound}", key)
    return float(value)


def shown(residency: Residency) -> Mapping[str, Any]:
    """The options as a load's ``recipe_options`` show them (``auto_evict`` when set)."""
    values = {
        "evict_idle_timeout": residency.evict_idle_timeout,
        "downsize_idle_timeout": residency.downsize_idle_timeout,
        "evict_weight_factor": residency.evict_weight_factor,
    }
    return (
        values if residency.auto_evict is None else {"auto_evict": residency.auto_evict, **values}
    )
