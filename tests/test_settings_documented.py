"""Every setting is in README's settings table, and the table names only real settings."""

from __future__ import annotations

import re
from pathlib import Path

from lemoncore.settings import Settings

README = Path(__file__).resolve().parents[1] / "README.md"


def documented() -> set[str]:
    """The names in the first column of the table (``[recipes.<recipe>]`` is ``recipes``;
    environment variables in parentheses are not names)."""
    table = README.read_text().split("### Settings", 1)[1].split("\n\n", 2)[1]
    names = set()
    for row in table.splitlines()[2:]:
        first = re.sub(r"\(`LEMON_\w+`\)", "", row.split("|")[1])
        names |= {re.sub(r"^\[(\w+)\..*\]$", r"\1", n) for n in re.findall(r"`([^`]+)`", first)}
    return names


def test_every_setting_is_documented_and_every_documented_one_exists() -> None:
    fields = set(Settings.model_fields)
    names = documented()
    assert fields - names == set(), "settings missing from README's table"
    assert names - fields == set(), "README documents settings that do not exist"
