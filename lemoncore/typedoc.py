"""Render the plugin API reference, ``docs/reference.md``, from its names' docstrings.

The names' own docstrings and field documentation are the one source::

    python -m lemoncore.typedoc > docs/reference.md

What it documents is ``lemoncore.plugin.__all__``, every name a plugin author imports, in
the sections of :data:`GROUPS` (by the module that defines each). Each type gets a
section: its kind (pydantic model, dataclass, enum, protocol, exception, class), its docstring (the
reST subset :mod:`lemoncore.hookdoc` converts), then a table of its fields with their
declared type, default and documentation (a pydantic ``Field(description=...)``, else the
source's comment on or just above the field's line), or an enum's members, an
exception's HTTP answer, and its public methods and properties with their docstrings; a
function its signature and docstring; a constant or type alias its value and the source
comment above it; a module (``standin``) its docstring and a table of its names.
``tests/test_typedoc.py`` fails when the page differs from the output.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import io
import re
import tokenize
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import PurePath
from types import ModuleType
from typing import Any

from lemoncore.hookdoc import inline, to_markdown, write_page

COMMAND = "python -m lemoncore.typedoc > docs/reference.md"
HEADER = (
    f"<!-- Generated from the names' docstrings by `{COMMAND}`; edit the "
    "docstrings, not this file. -->"
)
INTRO = """\
Everything a plugin, its tests and its field checks use, all imported from one module:
`from lemoncore.plugin import Recipe, hookimpl`. `lemoncore.plugin` is the stable plugin API
([compatibility.md](compatibility.md)); the modules these names are defined in are
lemoncore's internals and may change in any minor release. Hooks and their arguments are
in [hooks.md](hooks.md); how they fit together is [writing-a-plugin.md](writing-a-plugin.md)."""

# The page's sections: a title and the modules (prefixes) that define its names, each in
# lemoncore.plugin's order; a name no section claims goes to the last.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Hooks", ("lemoncore.hookspecs",)),
    ("Recipes, backends and models", ("lemoncore.recipes", "lemoncore.models")),
    ("Installing and launching", ("lemoncore.launch", "lemoncore.lock")),
    (
        "Running an engine process yourself",
        ("lemoncore.supervisor", "lemoncore.exits", "lemoncore.outputlines"),
    ),
    ("Errors", ("lemoncore.errors",)),
    ("The host", ("lemoncore.hosts", "lemoncore.gpus", "lemoncore.cpus")),
    ("Field checks", ("lemoncore.fieldchecks",)),
    ("Routes of another API surface", ("lemoncore.api", "lemoncore.durations")),
    ("The test kit", ()),
)
PUBLIC = "lemoncore.plugin"

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
            if isinstance(annotation, typing.ForwardRef):  # a TypedDict's, as written
                annotation = annotation.__forward_arg__
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
    elif getattr(cls, "_is_protocol", False) or typing.is_typeddict(cls):
        optional: frozenset[str] = getattr(cls, "__optional_keys__", frozenset())  # TypedDict
        rows = [
            (name, annotation, "omitted" if name in optional else "", comments.get(name, ""))
            for name, annotation in types.items()
            if not name.startswith("_")
        ]
    return rows


def kind(cls: type) -> str:
    if issubclass(cls, enum.Enum):
        return "enum"
    if typing.is_typeddict(cls):
        return "typed dict" + ("" if cls.__total__ else ", every key optional")  # type: ignore[attr-defined]
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


def section(name: str, cls: type) -> list[str]:
    """One type's markdown."""
    out = [f"### `{name}`", "", f"`{PUBLIC}.{name}` · {kind(cls)}", ""]
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
    if not doc or doc.startswith(f"{cls.__name__}(") or doc in _INHERITED:
        return ""
    return doc


_INHERITED = {inspect.getdoc(enum.StrEnum), inspect.getdoc(dict)}  # an enum's, a TypedDict's


def _first(doc: str) -> str:
    return inline_cell(doc.split("\n\n", 1)[0])


def assignment_comment(module: ModuleType, name: str) -> str:
    """The source comment on or just above ``NAME = ...`` at the top of ``module``."""
    lines = inspect.getsource(module).splitlines()
    for number, line in enumerate(lines):
        if re.match(rf"{name}\b(\s*:[^=]+)?\s*=", line):
            if "  # " in line:
                return line.split("  # ", 1)[1].strip()
            above: list[str] = []
            while number > 0 and lines[number - 1].startswith("#"):
                number -= 1
                above.insert(0, lines[number].lstrip("#").strip())
            return " ".join(above)
    return ""


def _function(obj: object) -> Any:
    plain = inspect.unwrap(obj) if callable(obj) else obj  # through functools.cache
    return plain if inspect.isfunction(plain) else None


def summary(name: str, obj: object, module: ModuleType) -> str:
    """One line for the tables: the first paragraph of its documentation."""
    if inspect.isclass(obj):
        return _first(own_doc(obj))
    if inspect.ismodule(obj) or (function := _function(obj)) is not None:
        return _first(inspect.getdoc(obj if inspect.ismodule(obj) else function) or "")
    return inline_cell(assignment_comment(module, name))


def value_section(name: str, obj: object, module: ModuleType) -> list[str]:
    """A function's, a constant's, a type alias's or a module's markdown."""
    out = [f"### `{name}`", ""]
    if inspect.ismodule(obj):
        out += [f"`{PUBLIC}.{name}` · module", "", to_markdown(inspect.getdoc(obj) or ""), ""]
        out += ["| Name | What it is |", "|---|---|"]
        for member, value in vars(obj).items():
            defined = getattr(value, "__module__", None) == obj.__name__
            if not member.startswith("_") and (defined or member.isupper()):
                shown = f"`{inline_cell(_signature(member, f))}`" if (f := _function(value)) else ""
                if member.isupper():
                    shown = f"`{inline_cell(value_text(value))}`"
                doc = " ".join(filter(None, (shown, summary(member, value, obj))))
                out.append(f"| `{member}` | {doc or kind(value)} |")
        return [*out, ""]
    if (function := _function(obj)) is not None:
        kind_ = "async function" if inspect.iscoroutinefunction(function) else "function"
        out += [f"`{PUBLIC}.{name}` · {kind_}", "", f"`{_signature(name, function)}`", ""]
        doc = inspect.getdoc(function) or ""
    elif typing.get_origin(obj) is not None:
        shown = str(obj).replace("collections.abc.", "").replace("typing.", "")
        out += [f"`{PUBLIC}.{name}` · type alias", "", f"`{inline_cell(shown)}`", ""]
        doc = assignment_comment(module, name)
    else:
        shown = value_text(obj)
        if isinstance(obj, Mapping):
            shown = f"{type(obj).__name__} of {', '.join(map(repr, obj))}"
        elif " object at 0x" in shown:
            shown = f"a {type(obj).__name__}"
        what = "decorator" if callable(obj) else "constant"
        out += [f"`{PUBLIC}.{name}` · {what}", "", f"`{inline_cell(shown)}`", ""]
        doc = assignment_comment(module, name)
    return [*out, to_markdown(doc).rstrip("\n"), ""] if doc else out


def grouped(exports: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """The exported names by section (:data:`GROUPS`), in the exports' order."""
    found: dict[str, list[str]] = {title: [] for title, _ in GROUPS}
    for name, module in exports.items():
        title = next(
            (t for t, ps in GROUPS if any(module == p or module.startswith(p + ".") for p in ps)),
            GROUPS[-1][0],
        )
        found[title].append(name)
    return [(title, names) for title, names in found.items() if names]


def render(exports: Mapping[str, str] | None = None) -> str:
    """The whole markdown reference of ``exports`` (name -> defining module; default:
    ``lemoncore.plugin``'s, every name of its ``__all__``)."""
    if exports is None:
        plugin = importlib.import_module(PUBLIC)
        exports = {n: m for n, m in plugin._EXPORTS.items() if n in plugin.__all__}
    parts = [HEADER, "", "# Plugin API reference", "", INTRO, ""]
    for title, names in grouped(exports):
        resolved = [(n, importlib.import_module(exports[n])) for n in names]
        values = [(n, m, getattr(importlib.import_module(PUBLIC), n)) for n, m in resolved]
        parts += ["", f"## {title}", "", "| Name | What it is |", "|---|---|"]
        parts += [f"| [`{n}`](#{n.lower()}) | {summary(n, v, m)} |" for n, m, v in values]
        for name, module, value in values:
            shown = section(name, value) if inspect.isclass(value) else None
            parts += ["", *(shown or value_section(name, value, module))]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(parts)).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the reference to standard output: ``python -m lemoncore.typedoc >
    docs/reference.md``."""
    return write_page(render, COMMAND, argv)


if __name__ == "__main__":
    raise SystemExit(main())
