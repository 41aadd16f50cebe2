"""Render the reference of the public types, ``docs/reference.md``, from their docstrings.

The types' own docstrings and field documentation are the one source::

    python -m lemoncore.typedoc > docs/reference.md

:data:`TYPES` lists what a plugin author uses, by module. Each type gets a section: its
kind (pydantic model, dataclass, enum, protocol, exception, class), its docstring (the
reST subset :mod:`lemoncore.hookdoc` converts), then a table of its fields with their
declared type, default and documentation (a pydantic ``Field(description=...)``, else the
source's comment on or just above the field's line), or an enum's members, an
exception's HTTP answer, and its public methods and properties with their docstrings.
``tests/test_docs.py`` fails when the page differs from the output.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import io
import re
import tokenize
from collections.abc import Iterator, Sequence
from pathlib import PurePath
from typing import Any

from lemoncore.hookdoc import inline, to_markdown, write_page

COMMAND = "python -m lemoncore.typedoc > docs/reference.md"
HEADER = (
    f"<!-- Generated from the types' docstrings by `{COMMAND}`; edit the "
    "docstrings, not this file. -->"
)
INTRO = """\
The types a plugin builds, returns or receives, by module. Hooks and their arguments are
in [hooks.md](hooks.md); how they fit together is
[writing-a-plugin.md](writing-a-plugin.md). Everything here is importable from the module
named under each heading; types not listed are lemoncore's internals and may change
without notice."""

TYPES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "lemoncore.recipes",
        (
            "Recipe",
            "Backend",
            "BackendContribution",
            "SupportRow",
            "OptionSpec",
            "OptionScope",
            "ArgFlag",
            "ModelInfo",
            "Endpoint",
            "Device",
            "DeviceKind",
            "Format",
            "Tier",
            "SlotPolicy",
            "ModelType",
        ),
    ),
    (
        "lemoncore.launch",
        (
            "InstallPlan",
            "Artifact",
            "LaunchContext",
            "LaunchSpec",
            "Runner",
            "Lifecycle",
            "ServerState",
            "Installer",
            "Installed",
            "PinRefresher",
            "Migration",
            "StartupTask",
        ),
    ),
    (
        "lemoncore.errors",
        ("LemonError", "LaunchRefused", "RequestRefused", "InstallError", "ErrorShape"),
    ),
    ("lemoncore.lock", ("Pin",)),
    ("lemoncore.hosts", ("HostInfo", "HostDevice")),
    ("lemoncore.models", ("Checkpoint",)),
    ("lemoncore.supervisor", ("StartError",)),
    ("lemoncore.exits", ("EngineExit",)),
    ("lemoncore.conformance", ("ConformanceTarget", "BackendConformance")),
    ("lemoncore.testing", ("ServerProcess",)),
)

_FIELD_LINE = re.compile(r"^\s+(\w+)\s*:")


def inline_cell(text: str) -> str:
    """Text for a markdown table cell: markup converted, on one line, pipes escaped."""
    return inline(" ".join(text.split())).replace("|", "\\|")


def value_text(value: Any) -> str:
    """A default as source-like text, stable from run to run (sets sorted)."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, (set, frozenset)):
        items = ", ".join(sorted(map(value_text, value)))
        return f"{type(value).__name__}({{{items}}})" if value else f"{type(value).__name__}()"
    if isinstance(value, PurePath):
        return f"Path({str(value)!r})"
    return repr(value)


def field_comments(cls: type) -> dict[str, str]:
    """Each field's source comment in ``cls``'s own body: on its line, else the comment
    lines just above it."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    found: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        if (match := _FIELD_LINE.match(line)) is None or line.lstrip().startswith("#"):
            continue
        if number in comments:
            found[match[1]] = comments[number]
            continue
        above: list[str] = []
        at = number - 1
        while at in comments and lines[at - 1].lstrip().startswith("#"):
            above.insert(0, comments[at])
            at -= 1
        if above:
            found[match[1]] = " ".join(above)
    return found


def declared_types(cls: type) -> dict[str, str]:
    """Declared field types as written in the source, through the class hierarchy."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            out[name] = (
                annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
            )
    return out


def fields(cls: type) -> list[tuple[str, str, str, str]]:
    """(name, type, default, doc) for each field of a pydantic model, dataclass or
    protocol, in declaration order; "" for a required field's default."""
    types = declared_types(cls)
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("lemoncore"):
            comments.update(field_comments(klass))
    rows: list[tuple[str, str, str, str]] = []
    if model_fields := getattr(cls, "model_fields", None):
        for name, info in model_fields.items():
            default = (
                ""
                if info.is_required()
                else value_text(info.default_factory() if info.default_factory else info.default)
            )
            rows.append(
                (name, types.get(name, ""), default, info.description or comments.get(name, ""))
            )
    elif dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                default = value_text(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                default = value_text(f.default_factory())
            else:
                default = ""
            rows.append((f.name, str(f.type), default, comments.get(f.name, "")))
    elif getattr(cls, "_is_protocol", False):
        rows = [
            (name, annotation, "", comments.get(name, ""))
            for name, annotation in types.items()
            if not name.startswith("_")
        ]
    return rows


def kind(cls: type) -> str:
    if issubclass(cls, enum.Enum):
        return "enum"
    if hasattr(cls, "model_fields"):
        return "pydantic model" + (", frozen" if cls.model_config.get("frozen") else "")  # type: ignore[attr-defined]
    if dataclasses.is_dataclass(cls):
        params = getattr(cls, "__dataclass_params__", None)
        return "dataclass" + (", frozen" if params is not None and params.frozen else "")
    if getattr(cls, "_is_protocol", False):
        return "protocol (implement it; no need to subclass)"
    if issubclass(cls, BaseException):
        return f"exception ({', '.join(b.__name__ for b in cls.__bases__)})"
    return "class"


def _parameter(p: inspect.Parameter) -> str:
    stars = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
    text = stars + p.name
    if p.annotation is not inspect.Parameter.empty:
        text += f": {p.annotation}"
    if p.default is not inspect.Parameter.empty:
        text += f" = {value_text(p.default)}"
    return text


def _signature(name: str, member: Any) -> str:
    function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
    sig = inspect.signature(function)
    params = [_parameter(p) for p in sig.parameters.values() if p.name not in {"self", "cls"}]
    returns = (
        "" if sig.return_annotation is inspect.Signature.empty else f" -> {sig.return_annotation}"
    )
    prefix = "async " if inspect.iscoroutinefunction(function) else ""
    prefix += "classmethod " if isinstance(member, classmethod) else ""
    return f"{prefix}{name}({', '.join(params)}){returns}"


def members(cls: type) -> Iterator[tuple[str, str]]:
    """(signature, doc) of the public methods and properties ``cls`` defines itself."""
    for name, member in vars(cls).items():
        if name.startswith("_") or (
            getattr(cls, "_is_protocol", False) and name in declared_types(cls)
        ):
            continue
        if isinstance(member, property):
            returns = inspect.signature(member.fget).return_annotation if member.fget else ""
            yield f"{name}: {returns} (property)", inspect.getdoc(member) or ""
        elif inspect.isfunction(member) or isinstance(member, (classmethod, staticmethod)):
            if name.startswith("test_"):
                continue
            yield _signature(name, member), inspect.getdoc(member) or ""


def section(module: str, cls: type) -> list[str]:
    """One type's markdown."""
    out = [f"## `{cls.__name__}`", "", f"`{module}.{cls.__name__}` · {kind(cls)}", ""]
    if doc := own_doc(cls):
        out += [to_markdown(doc).rstrip("\n"), ""]
    if issubclass(cls, enum.Enum):
        out += ["| Member | Value |", "|---|---|"]
        out += [f"| `{m.name}` | `{m.value!r}` |" for m in cls]
        out.append("")
    elif issubclass(cls, BaseException):
        answer = [
            f"{attr} `{getattr(cls, attr)!r}`"
            for attr in ("status", "type", "code")
            if hasattr(cls, attr)
        ]
        if answer:
            out += [f"Answered with {', '.join(answer)}.", ""]
    if rows := fields(cls):
        out += ["| Field | Type | Default | Description |", "|---|---|---|---|"]
        out += [
            f"| `{name}` | `{inline_cell(type_)}` | "
            f"{f'`{inline_cell(default)}`' if default else 'required'} | "
            f"{inline_cell(doc)} |"
            for name, type_, default, doc in rows
        ]
        out.append("")
    if methods := list(members(cls)):
        out += ["**Methods and properties**", ""]
        out += [
            f"- `{sig}`" + (f": {inline(' '.join(doc.split()))}" if doc else "")
            for sig, doc in methods
        ]
        out.append("")
    return out


def own_doc(cls: type) -> str:
    """``cls``'s own docstring: "" when it has none (not inherited, nor the signature a
    dataclass or the text an enum is given by default)."""
    doc = inspect.getdoc(cls) if "__doc__" in vars(cls) else None
    if not doc or doc.startswith(f"{cls.__name__}(") or doc == inspect.getdoc(enum.StrEnum):
        return ""
    return doc


def _summary(cls: type) -> str:
    return inline_cell(own_doc(cls).split("\n\n", 1)[0])


def alias_section(module: str, name: str, alias: object) -> list[str]:
    """A type alias's markdown: its name and what it stands for."""
    shown = inline_cell(str(alias).replace("collections.abc.", "").replace("typing.", ""))
    return [f"## `{name}`", "", f"`{module}.{name}` · type alias", "", f"`{shown}`", ""]


def render(types: Sequence[tuple[str, Sequence[str]]] = TYPES) -> str:
    """The whole markdown reference for ``types`` (module, type names)."""
    resolved = [
        (module, name, getattr(importlib.import_module(module), name))
        for module, names in types
        for name in names
    ]
    parts = [
        HEADER,
        "",
        "# Type reference",
        "",
        INTRO,
        "",
        "| Type | Module | What it is |",
        "|---|---|---|",
    ]
    parts += [
        f"| [`{name}`](#{name.lower()}) | `{module}` | "
        f"{_summary(obj) if inspect.isclass(obj) else 'type alias'} |"
        for module, name, obj in resolved
    ]
    for module, name, obj in resolved:
        parts += [
            "",
            *(section(module, obj) if inspect.isclass(obj) else alias_section(module, name, obj)),
        ]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(parts)).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the reference to standard output: ``python -m lemoncore.typedoc >
    docs/reference.md``."""
    return write_page(render, COMMAND, argv)


if __name__ == "__main__":
    raise SystemExit(main())
