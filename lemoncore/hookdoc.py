"""Render the hook reference, ``docs/hooks.md``, from :mod:`lemoncore.hookspecs`.

The hookspecs' docstrings are the one source; the page is generated from them::

    python -m lemoncore.hookdoc > docs/hooks.md

:func:`render` gives the module docstring, a table of the hooks, then one section per
hookspec in source order: its signature (from :mod:`inspect`, with the ``@hookspec``
options that matter, such as ``firstresult=True``) and its docstring as markdown. The
docstrings use a small reST subset, converted here: double backquotes become single ones,
``:param name:``, ``:returns:`` and ``:raises Name:`` fields become a parameter list and
Returns and Raises lines, a paragraph ending in ``::`` introduces a Python code block
(fenced in the page), and ``.. versionadded::``/``.. versionchanged::`` become "Added in"
and "Changed in" lines. ``tests/test_docs.py`` fails when the page differs from the output.
"""

from __future__ import annotations

import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from lemoncore import hookspecs

COMMAND = "python -m lemoncore.hookdoc > docs/hooks.md"
HEADER = (
    f"<!-- Generated from lemoncore/hookspecs/ by `{COMMAND}`; edit the "
    "docstrings there, not this file. -->"
)
WIDTH = 88  # a signature longer than this gets one parameter per line

_FIELD = re.compile(r"^:(param|returns|raises)(?: ([\w.]+))?:\s*(.*)$")
_DIRECTIVE = re.compile(r"^\.\. (versionadded|versionchanged|deprecated):: (\S+)\s*(.*)$")
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_ROLE = re.compile(r":[a-z]+:`(~?)([\w.]+)`")
_DIRECTIVE_WORDS = {
    "versionadded": "Added in",
    "versionchanged": "Changed in",
    "deprecated": "Deprecated in",
}


def specs(module: ModuleType = hookspecs) -> list[Callable[..., Any]]:
    """The hookspecs ``module`` declares, in the order of its ``HOOKS``."""
    marker = f"{module.PROJECT}_spec"
    return [fn for fn in module.HOOKS if hasattr(fn, marker)]


def spec_options(fn: Callable[..., Any], project: str = hookspecs.PROJECT) -> dict[str, Any]:
    """The options given to ``@hookspec`` for ``fn`` (pluggy's ``HookspecOpts``)."""
    return dict(getattr(fn, f"{project}_spec"))


def _annotation(annotation: Any) -> str:
    # With postponed evaluation the annotations are the source's own text.
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def signature(fn: Callable[..., Any], project: str = hookspecs.PROJECT) -> str:
    """``fn``'s declaration as Python source: the decorator and the ``def`` line."""
    options = spec_options(fn, project)
    given = [f"{k}={v!r}" for k, v in options.items() if k in {"firstresult", "historic"} and v]
    decorator = "@hookspec" + (f"({', '.join(given)})" if given else "")
    sig = inspect.signature(fn)
    params = [
        p.name
        if p.annotation is inspect.Parameter.empty
        else f"{p.name}: {_annotation(p.annotation)}"
        for p in sig.parameters.values()
    ]
    returns = (
        ""
        if sig.return_annotation is inspect.Signature.empty
        else f" -> {_annotation(sig.return_annotation)}"
    )
    line = f"def {fn.__name__}({', '.join(params)}){returns}: ..."
    if len(line) > WIDTH:
        line = "\n".join(
            [f"def {fn.__name__}(", *(f"    {p}," for p in params), f"){returns}: ..."]
        )
    return f"{decorator}\n{line}"


def inline(text: str) -> str:
    """reST inline markup as markdown: double-backquoted text and roles (``:class:``
    and the like, ``~`` keeping the last name) become code spans."""
    text = _ROLE.sub(lambda m: f"``{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}``", text)
    return _LITERAL.sub(r"`\1`", text)


def _indented_block(lines: list[str], start: int) -> tuple[list[str], int]:
    """The indented lines from ``start`` (blank lines inside kept), and where they end."""
    end = start
    while end < len(lines) and (not lines[end].strip() or lines[end][:1].isspace()):
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end], end


def _fields(fields: Sequence[tuple[str, str, str]]) -> list[str]:
    """``:param:`` fields as a list; ``:returns:`` and ``:raises:`` as lines."""
    out: list[str] = []
    params = [(name, text) for kind, name, text in fields if kind == "param"]
    if params:
        out += ["**Parameters**", "", *(f"- `{name}`: {text}" for name, text in params), ""]
    for kind, name, text in fields:
        if kind == "returns":
            out += [f"**Returns:** {text}", ""]
        elif kind == "raises":
            out += [f"**Raises** `{name}`: {text}", ""]
    return out


def to_markdown(doc: str) -> str:
    """A docstring (the reST subset this module describes) as markdown."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    prose: list[str] = []  # inline markup may span lines: converted a run at a time
    fields: list[tuple[str, str, str]] = []

    def flush() -> None:
        out.extend(inline("\n".join(prose)).split("\n") if prose else [])
        prose.clear()
        out.extend(_fields(fields))
        fields.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if field := _FIELD.match(line):
            more, i = _indented_block(lines, i + 1)
            indent = "\n  " if field[1] == "param" else "\n"  # a list item continues
            text = indent.join([field[3], *(m.strip() for m in more if m.strip())])
            if prose:
                flush()
            fields.append((field[1], field[2] or "", inline(text)))
        elif directive := _DIRECTIVE.match(line):
            flush()
            more, i = _indented_block(lines, i + 1)
            text = inline(" ".join([directive[3], *(m.strip() for m in more)]).strip())
            words, version = _DIRECTIVE_WORDS[directive[1]], directive[2]
            out += [
                f"*{words} lemoncore {version}:* {text}"
                if text
                else f"*{words} lemoncore {version}.*",
                "",
            ]
        elif line.rstrip().endswith("::"):
            if fields:
                flush()
            intro = line.rstrip()[:-2].rstrip()
            prose.append(intro + ":" if intro else "")
            flush()
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            block, i = _indented_block(lines, i)
            out += ["", "```python", *textwrap.dedent("\n".join(block)).splitlines(), "```", ""]
        else:
            i += 1
            if fields and not line.strip():
                continue  # blank lines between fields, or after them, separate nothing
            if fields:
                flush()
            prose.append(line)
    flush()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def _summary(doc: str) -> str:
    """The docstring's first paragraph on one line, for the table."""
    first = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return inline(" ".join(first.split())).replace("|", "\\|")


def render(module: ModuleType = hookspecs) -> str:
    """The whole markdown reference for ``module``'s hookspecs."""
    hooks = specs(module)
    project = str(module.PROJECT)
    parts = [
        HEADER,
        "",
        "# Hook reference",
        "",
        to_markdown(module.__doc__ or ""),
        "| Hook | First result | What it does |",
        "|---|---|---|",
    ]
    parts += [
        f"| [`{fn.__name__}`](#{_anchor(fn)}) | "
        f"{'yes' if spec_options(fn, project).get('firstresult') else 'no'} | "
        f"{_summary(fn.__doc__ or '')} |"
        for fn in hooks
    ]
    for fn in hooks:
        parts += ["", f"## `{_heading(fn)}`", "", "```python", signature(fn, project), "```", ""]
        if warning := spec_options(fn, project).get("warn_on_impl"):  # deprecated hooks
            parts += [f"**Deprecated:** {warning}", ""]
        parts.append(to_markdown(fn.__doc__ or "").rstrip("\n"))
    return "\n".join(parts).rstrip("\n") + "\n"


def _heading(fn: Callable[..., Any]) -> str:
    return f"{fn.__name__}({', '.join(inspect.signature(fn).parameters)})"


def _anchor(fn: Callable[..., Any]) -> str:
    """The id GitHub gives the section's heading: lower case, punctuation dropped,
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", _heading(fn).lower()).replace(" ", "-")


def write_page(page: Callable[[], str], command: str, argv: Sequence[str] | None = None) -> int:
    """A generated page's command line: no arguments, the page on standard output."""
    if list(sys.argv[1:] if argv is None else argv):
        print(f"usage: {command}", file=sys.stderr)
        return 2
    sys.stdout.write(page())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Write the reference to standard output: ``python -m lemoncore.hookdoc >
    docs/hooks.md``."""
    return write_page(render, COMMAND, argv)


if __name__ == "__main__":
    raise SystemExit(main())
