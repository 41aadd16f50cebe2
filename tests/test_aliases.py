"""Run-time aliases (lemoncore.models.aliases): chains resolve hop by hop, and what
Lemonade's AliasManager::set_alias refuses is refused, in its words."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemoncore.errors import LemonError
from lemoncore.models.alias_book import AliasBook
from lemoncore.models.aliases import MAX_CHAIN, refusal, resolve


def test_chains_resolve_to_their_end_and_latest_is_ignored() -> None:
    book = {"a": "b", "b": "model"}
    assert resolve(book, "a") == resolve(book, "a:latest") == "model"
    assert resolve(book, "model") is None  # not an alias


def test_a_cycle_or_an_overlong_chain_resolves_to_nothing() -> None:
    assert resolve({"a": "b", "b": "a"}, "a") is None
    long = {f"a{i}": f"a{i + 1}" for i in range(MAX_CHAIN + 1)}
    assert resolve(long, "a0") is None
    assert resolve(long, f"a{2}") is not None


@pytest.mark.parametrize(
    ("book", "alias", "target", "words"),
    [
        ({}, "", "m", "cannot be empty"),
        ({}, "a", "", "cannot be empty"),
        ({}, "a", "a", "itself"),
        ({"b": "a"}, "a", "b", "Circular alias dependency detected: a -> b"),
        ({f"a{i}": f"a{i + 1}" for i in range(1, MAX_CHAIN + 2)}, "a0", "a1", "max depth"),
    ],
)
def test_refusals(book: dict[str, str], alias: str, target: str, words: str) -> None:
    why = refusal(book, alias, target)
    assert why is not None and words in why, why


def test_the_book_persists_and_refuses_with_a_409(tmp_path: Path) -> None:
    book = AliasBook(tmp_path / "aliases.json")
    book.set("short", "Model-A")
    book.set("shorter", "short")
    assert AliasBook(tmp_path / "aliases.json").resolve("shorter") == "Model-A"
    with pytest.raises(LemonError) as refused:
        book.set("short", "shorter")
    assert refused.value.status == 409 and refused.value.code == "alias_conflict"
    assert book.remove("shorter") and not book.remove("shorter")
    assert AliasBook(tmp_path / "aliases.json").all() == {"short": "Model-A"}


def test_a_broken_file_is_no_aliases(tmp_path: Path) -> None:
    (tmp_path / "aliases.json").write_text('["not", "a", "map"]')
    assert AliasBook(tmp_path / "aliases.json").all() == {}


def test_the_longest_chain_refusal_accepts_is_one_resolve_follows() -> None:
    book = {f"a{i}": f"a{i + 1}" for i in range(1, MAX_CHAIN)}  # a1 -> ... -> a10 (a model)
    assert refusal(book, "a0", "a1") is None  # a0: MAX_CHAIN hops to a10
    assert resolve({**book, "a0": "a1"}, "a0") == f"a{MAX_CHAIN}"
    longer = {f"a{i}": f"a{i + 1}" for i in range(1, MAX_CHAIN + 1)}
    assert "max depth" in (refusal(longer, "a0", "a1") or "")
