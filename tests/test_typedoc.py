"""The plugin API reference has one source, the names' docstrings: docs/reference.md is
exactly what lemoncore.typedoc renders, and it documents every name of
``lemoncore.plugin.__all__`` (what plugins import; tests/test_plugin_module.py holds the
plugins to importing only that), in one of its sections."""

from __future__ import annotations

import re
from pathlib import Path

import lemoncore.plugin
from lemoncore import typedoc

ROOT = Path(__file__).resolve().parents[1]


def test_docs_reference_md_is_generated_from_the_docstrings() -> None:
    assert (ROOT / "docs/reference.md").read_text() == typedoc.render(), (
        "docs/reference.md differs from the types' docstrings; edit those, not the page, "
        f"and regenerate it: {typedoc.COMMAND}"
    )


def test_every_name_of_the_plugin_module_has_a_section_and_a_row() -> None:
    page = typedoc.render()
    sections = re.findall(r"^### `(\w+)`\n\n`lemoncore\.plugin\.(\w+)` · ", page, re.MULTILINE)
    assert [a for a, b in sections if a == b] == [a for a, _ in sections]
    assert sorted(a for a, _ in sections) == lemoncore.plugin.__all__
    rows = re.findall(r"^\| \[`(\w+)`\]\(#(\w+)\) \| (.*) \|$", page, re.MULTILINE)
    assert sorted(name for name, _, _ in rows) == lemoncore.plugin.__all__
    assert all(anchor == name.lower() for name, anchor, _ in rows)
    undocumented = [name for name, _, what in rows if not what.strip()]
    assert undocumented == [], "give them a docstring (or a comment above the assignment)"


def test_every_section_has_a_title_and_the_last_takes_the_rest() -> None:
    grouped = typedoc.grouped({"hookimpl": "lemoncore.hookspecs.markers", "x": "elsewhere"})
    assert grouped == [("Hooks", ["hookimpl"]), (typedoc.GROUPS[-1][0], ["x"])]


def test_every_field_row_has_a_type_and_the_page_has_no_rest_markup() -> None:
    page = typedoc.render()
    assert "``" not in page and ":class:" not in page and ":meth:" not in page
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", page, re.MULTILINE)
    assert rows and all(type_ for _, type_ in rows)
