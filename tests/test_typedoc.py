"""The type reference has one source, the types' docstrings: docs/reference.md is exactly
what lemoncore.typedoc renders, and it covers every lemoncore type the shipped plugins and
the example import from the plugin-facing modules."""

from __future__ import annotations

import re
from pathlib import Path

from lemoncore import typedoc

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_FACING = (
    "lemoncore.recipes",
    "lemoncore.launch",
    "lemoncore.errors",
    "lemoncore.conformance",
    "lemoncore.testing",
)


def test_docs_reference_md_is_generated_from_the_docstrings() -> None:
    assert (ROOT / "docs/reference.md").read_text() == typedoc.render(), (
        "docs/reference.md differs from the types' docstrings; edit those, not the page, "
        f"and regenerate it: {typedoc.COMMAND}"
    )


def test_every_type_plugins_import_is_documented() -> None:
    documented = {name for _, names in typedoc.TYPES for name in names}
    sources = [
        *ROOT.glob("plugins/*/lemon_plugin_*/*.py"),
        *ROOT.glob("examples/*/lemon_plugin_*/*.py"),
        *ROOT.glob("lemoncore/scaffold/templates/*.tmpl"),
    ]
    imported: set[str] = set()
    for path in sources:
        for module, names in re.findall(
            r"from (lemoncore\.\w+) import \(?([\w\s,]+)\)?", path.read_text()
        ):
            if module in PLUGIN_FACING:
                imported |= {n for n in re.split(r"[\s,]+", names) if n}
    types = {n for n in imported if n[:1].isupper() and not n.isupper()}  # not constants
    assert types - documented == set(), "add them to lemoncore.typedoc.TYPES"


def test_every_field_row_has_a_type_and_the_page_has_no_rest_markup() -> None:
    page = typedoc.render()
    assert "``" not in page and ":class:" not in page and ":meth:" not in page
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", page, re.MULTILINE)
    assert rows and all(type_ for _, type_ in rows)
