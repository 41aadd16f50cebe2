"""Run-time aliases: names an administrator points at a model (or at another alias)
while the server runs, kept in ``<cache_dir>/aliases.json``. As Lemonade's
``AliasManager`` (``src/cpp/server/alias_manager.cpp``): chains resolve hop by hop, at
most :data:`MAX_CHAIN` hops; a cycle or a longer chain is refused when it is set, and
resolves to nothing if one is found later. Pure functions over the alias map."""

from __future__ import annotations

from collections.abc import Mapping

MAX_CHAIN = 10  # AliasManager::MAX_ALIAS_CHAIN_DEPTH (alias_manager.h)
MAX_ALIASES = 1024  # lemoncore's bound: the file is read whole at start


def resolve(aliases: Mapping[str, str], name: str) -> str | None:
    """The name ``name`` ends at through ``aliases``, or ``None`` when it is no alias
    (or its chain cycles or runs past :data:`MAX_CHAIN`): ``resolve_alias``."""
    current = name.removesuffix(":latest")
    if current not in aliases:
        return None
    seen = {current}
    for _ in range(MAX_CHAIN):
        current = aliases[current]
        if current in seen:
            return None
        seen.add(current)
        if current not in aliases:
            return current
    return None


def refusal(aliases: Mapping[str, str], alias: str, target: str) -> str | None:
    """Why ``alias`` may not point at ``target``, in Lemonade's words (``set_alias``),
    or ``None``."""
    if not alias:
        return "Alias name cannot be empty"
    if not target:
        return "Alias target cannot be empty"
    if alias == target:
        return "Alias cannot point to itself"
    if alias not in aliases and len(aliases) >= MAX_ALIASES:
        return f"at most {MAX_ALIASES} aliases; remove one first"
    chain = {**aliases, alias: target}
    current, seen = target, {alias}
    for _ in range(MAX_CHAIN):  # hops after the first, as resolve() follows them
        if current not in chain:
            return None
        if current in seen:
            return f"Circular alias dependency detected: {alias} -> {target}"
        seen.add(current)
        current = chain[current]
    return f"Alias resolution chain exceeded max depth of {MAX_CHAIN}"
