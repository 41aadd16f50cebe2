"""Options of a load: declared, typed, scoped, and resolved in one order.

Layers, lowest first: declared defaults < the recipe's configuration section < the
model's ``recipe_options`` < options saved for the model < the request. A ``None`` in a
layer means "not set here". Every layer is checked against the options the recipe and the
selected backend declare, so an unknown, mistyped or out-of-range option is refused
before anything is evicted or spawned; ``admin`` options come from the configuration
only. ``backend`` is a selector, not an option: it picks the backend and never reaches a
plugin. Pure functions over data.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from lemoncore.errors import LemonError
from lemoncore.recipes import ArgFlag, Backend, OptionScope, OptionSpec, Recipe

SELECTOR = "backend"
ALLOW_SUFFIX = "_allow"
_INT = re.compile(r"-?[0-9]+")  # ASCII digits: the engine parses no others
_NUMBER = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)")
_NAMES = re.compile(r"[A-Za-z0-9_]+(,[A-Za-z0-9_]+)*")
OptionValue: TypeAlias = str | int | float | bool | Sequence[str]
"""An option's value, of its declared type (``list``: strings; ``args``: a command line)."""


class OptionError(LemonError, ValueError):
    """An option is unknown, not the caller's to set, or has a bad value: 400 for what a
    caller sent, 500 for a bad configuration file."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(
            message,
            status,
            code="invalid_option" if status < 500 else "invalid_configuration",
            param=param,
        )


@dataclass(frozen=True)
class Layer:
    """One source of option values, named as a user would look for it."""

    source: str  # "in the request", "in model X's recipe_options", ...
    values: Mapping[str, Any]


def declared(recipe: Recipe, backend: Backend | None = None) -> tuple[OptionSpec, ...]:
    """The options of ``recipe`` and ``backend`` (every backend when ``None``), with the
    ``<name>_allow`` admin option that widens each ``args`` option."""
    backends = recipe.backends if backend is None else (backend,)
    # The recipe's own declaration wins over one a contributed backend repeats.
    specs = {s.name: s for s in (*(o for b in backends for o in b.options), *recipe.options)}
    for spec in list(specs.values()):
        if spec.type == "args":
            specs.setdefault(
                spec.name + ALLOW_SUFFIX,
                OptionSpec(
                    name=spec.name + ALLOW_SUFFIX,
                    type="list",
                    scope=OptionScope.ADMIN,
                    help=f"Flags {spec.name} accepts beyond its built-in list; each takes at "
                    "most one value, which is not checked.",
                ),
            )
    return tuple(specs.values())


def granted_flags(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """The extra flags each ``args`` option's ``<name>_allow`` grants in ``config``."""
    return {
        k.removesuffix(ALLOW_SUFFIX): v
        for k, v in config.items()
        if k.endswith(ALLOW_SUFFIX) and isinstance(v, list)
    }


def selector(layers: Sequence[Layer]) -> str | None:
    """The ``backend`` the highest layer names, if any."""
    for layer in reversed(layers):
        value = layer.values.get(SELECTOR)
        if value is not None:
            if not isinstance(value, str) or not value:
                raise OptionError(f"'backend' {layer.source} must be a backend name", SELECTOR)
            return value
    return None


def check(
    specs: Sequence[OptionSpec],
    layer: Layer,
    *,
    admin: bool,
    allowed_flags: Mapping[str, Sequence[str]] | None = None,
    section: str = "recipes.<recipe>",
) -> dict[str, OptionValue]:
    """``layer``'s values checked against ``specs`` and converted to their types.

    Without ``admin`` (a caller's values: JSON), types are strict (``"4096"`` or ``true``
    is not an int) and options of the admin scope are refused; the configuration, which
    the environment gives as strings, converts. ``allowed_flags`` maps an
    ``args`` option to the extra flags its ``_allow`` option grants.
    """
    by_name = {s.name: s for s in specs}
    settable = sorted(s.name for s in specs if admin or s.scope is OptionScope.REQUEST)
    status = 500 if admin else 400
    allowed = {**(allowed_flags or {}), **(granted_flags(layer.values) if admin else {})}
    checked: dict[str, OptionValue] = {}
    for key, value in layer.values.items():
        if key == SELECTOR:
            continue
        spec = by_name.get(key)
        if spec is None:
            raise OptionError(
                f"unknown option {key!r} {layer.source}; valid options: "
                f"{', '.join(settable) or 'none'}",
                key,
                status,
            )
        if spec.scope is OptionScope.ADMIN and not admin:
            raise OptionError(
                f"option {key!r} is an administrator setting and cannot be set "
                f"{layer.source}; set {section}.{key} in the configuration "
                "file",
                key,
            )
        if value is None:
            continue
        try:
            checked[key] = converted = _adapter(
                spec.type, spec.minimum, spec.maximum, spec.choices, not admin
            ).validate_python(value)
        except ValidationError as exc:
            raise OptionError(
                f"option {key!r} {layer.source}: {exc.errors()[0]['msg'].lower()} (got {value!r})",
                key,
                status,
            ) from None
        if spec.type == "args":
            check_args(
                converted, spec.flags, allowed.get(key, ()), key, layer.source, section, status
            )
    return checked


def resolve(
    specs: Sequence[OptionSpec], config: Mapping[str, Any], layers: Sequence[Layer], section: str
) -> tuple[dict[str, OptionValue], dict[str, OptionValue]]:
    """``(options, config)`` for a load: request-scope options resolved through the
    declared defaults, ``config`` (an already checked configuration section) and
    ``layers``; and admin-scope values from the defaults and ``config``."""
    admin_names = {s.name for s in specs if s.scope is OptionScope.ADMIN}
    names = {s.name for s in specs}
    defaults = {s.name: s.default for s in specs if s.default is not None}
    merged = {**defaults, **{k: v for k, v in config.items() if k in names}}
    options = {k: v for k, v in merged.items() if k not in admin_names}
    admin = {k: v for k, v in merged.items() if k in admin_names}
    for layer in layers:
        options.update(
            check(specs, layer, admin=False, allowed_flags=granted_flags(admin), section=section)
        )
    return options, admin


def check_args(
    text: str,
    flags: Iterable[ArgFlag],
    extra: Sequence[str],
    option: str,
    source: str,
    section: str,
    status: int = 400,
) -> list[str]:
    """An engine command line split into words, each flag on the allow-list with a value
    of its kind; ``extra`` flags (granted by an administrator) take one unchecked value."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise OptionError(f"{option} {source} cannot be parsed: {exc}", option, status) from None
    flags = tuple(flags)
    table = {name: flag for flag in flags for name in flag.names}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        flag = table.get(word)
        if flag is None and word in extra:
            if i < len(words) and (not words[i].startswith("-") or _NUMBER.fullmatch(words[i])):
                i += 1
            continue
        if flag is None:
            name, joined, given = word.partition("=")
            if joined and (name in table or name in extra):  # llama-server's parser reads
                named = table.get(name)  # --threads=2 as one unknown word (common/arg.cpp)
                wanted = name if named and named.takes == "switch" else f"{name} {given}"
                raise OptionError(
                    f"{option} {source}: write {wanted!r}, not {word!r}: the engine reads a "
                    "flag and its value as two words, not as flag=value",
                    option,
                    status,
                )
            listed = ", ".join(sorted(f.names[-1] for f in flags)) or "none"
            raise OptionError(
                f"{option} {source}: {word!r} is not allowed. Allowed flags: {listed}. "
                "Flags that take a path or URL never are; an administrator can allow more "
                f"with {section}.{option}{ALLOW_SUFFIX}",
                option,
                status,
            )
        if flag.takes == "switch":
            continue
        value = words[i] if i < len(words) else None
        i += 1
        if value is None or not _value_ok(flag, value):
            wanted = flag.takes if flag.takes != "choice" else " | ".join(flag.choices)
            if flag.choices and flag.takes != "choice":
                wanted += " or " + " | ".join(flag.choices)
            raise OptionError(
                f"{option} {source}: {word} takes {wanted}, not "
                f"{value if value is not None else 'nothing'!r}",
                option,
                status,
            )
    return words


def _value_ok(flag: ArgFlag, value: str) -> bool:
    if value in flag.choices:
        return True
    match flag.takes:
        case "int":
            return _INT.fullmatch(value) is not None
        case "float":
            return _NUMBER.fullmatch(value) is not None
        case "floats":
            return all(_NUMBER.fullmatch(part) for part in value.split(","))
        case "names":
            return _NAMES.fullmatch(value) is not None
    return False


@functools.cache
def _adapter(
    type_: str, minimum: float | None, maximum: float | None, choices: tuple[Any, ...], strict: bool
) -> TypeAdapter[Any]:
    bounds = Field(ge=minimum, le=maximum)
    annotation: Any = {
        "int": Annotated[int, bounds],
        "float": Annotated[float, bounds],
        "bool": bool,
        "str": str,
        "args": str,
        "list": list[str],
    }[type_]
    if choices:
        annotation = Literal[choices]
    return TypeAdapter(annotation, config=ConfigDict(strict=strict))


LIVE_STATE = frozenset({"pinned", "keep_alive"})  # a running server's, never saved


def saved_changes(
    specs: Sequence[OptionSpec],
    values: Mapping[str, Any],
    source: str,
    allowed_flags: Mapping[str, Sequence[str]] | None = None,
    section: str = "recipes.<recipe>",
) -> dict[str, OptionValue | None]:
    """What ``values`` (a ``POST /api/v1/models/{id}/options`` body, without its
    ``model_name`` and ``dry_run``) changes in a model's saved options: each option
    checked as a request's is (:func:`check`), ``None`` where it clears one. As Lemonade
    Server (``src/cpp/server/server.cpp``, ``handle_model_options_post``): ``null``
    clears an option, and so does ``""`` for a text option (never for a number); a
    running server's state (``pinned``, ``keep_alive``) is refused; nothing is changed
    unless every value is valid."""
    by_name = {s.name: s for s in specs}
    changes: dict[str, OptionValue | None] = {}
    kept: dict[str, Any] = {}
    for key, value in values.items():
        if key in LIVE_STATE:
            raise OptionError(
                f"{key!r} is a running model's state, not a saved option: give it to "
                "POST /api/v1/load",
                key,
            )
        spec = by_name.get(key)
        text = spec is not None and spec.type in {"str", "args"}
        if value is None or (value == "" and text):
            changes[key] = None
        else:
            kept[key] = value
    layer = Layer(source, kept)
    if (backend := selector([layer])) is not None:
        changes[SELECTOR] = backend
    # clearing what is not an option (or an administrator's) is refused as setting it is
    check(specs, Layer(source, dict.fromkeys(changes)), admin=False, section=section)
    return {
        **changes,
        **check(specs, layer, admin=False, allowed_flags=allowed_flags, section=section),
    }
