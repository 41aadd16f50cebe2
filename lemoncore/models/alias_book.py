"""The run-time aliases as a file: ``<cache_dir>/aliases.json``, read at start and
written on each change (:mod:`lemoncore.models.aliases` decides what may change)."""

from __future__ import annotations

from pathlib import Path

import structlog

from lemoncore.errors import LemonError
from lemoncore.jsonfile import read_json, write_json
from lemoncore.models import aliases

log = structlog.get_logger("lemoncore.models")


class AliasBook:
    """Alias -> target, persisted; a file that is not a map of names is logged and empty."""

    def __init__(self, path: Path) -> None:
        self.path = path
        found = read_json(path, {})
        valid = isinstance(found, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in found.items()
        )
        if not valid:
            log.warning("ignoring an invalid alias file", path=str(path))
        self._aliases: dict[str, str] = dict(found) if valid else {}

    def all(self) -> dict[str, str]:
        return dict(self._aliases)

    def resolve(self, name: str) -> str | None:
        """The target ``name`` ends at, if it is an alias."""
        return aliases.resolve(self._aliases, name)

    def set(self, alias: str, target: str) -> None:
        """Point ``alias`` at ``target``; a 409 ``alias_conflict`` in Lemonade's words
        when the chain would cycle or run too long."""
        why = aliases.refusal(self._aliases, alias, target)
        if why:
            raise LemonError(why, 409, code="alias_conflict", param="alias")
        self._aliases = {**self._aliases, alias: target}
        write_json(self.path, self._aliases)

    def remove(self, alias: str) -> bool:
        """Forget ``alias``; whether it was one."""
        if alias not in self._aliases:
            return False
        self._aliases = {a: t for a, t in self._aliases.items() if a != alias}
        write_json(self.path, self._aliases)
        return True
