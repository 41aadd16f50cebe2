"""The public name of every model when several sources use one name: Lemonade's naming
spec (``ModelManager::rebuild_public_model_aliases_locked``, model_manager.cpp), a pure
function over the models of each source.

Sources rank ``user`` (registered) over ``extra`` (found in ``extra_models_dir``) over
``builtin`` (the catalogue and the models backends declare). The first source that has a
name lists its model under the bare name; each other lists its own as ``source.name``.
``source.name`` is accepted for the winner too, and each model's ``aliases`` as input
names that are not listed; an alias of a ``user`` or ``extra`` model that is a built-in's
bare name takes that name over, and the built-in lists as ``builtin.name``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lemoncore.models.checkpoints import ModelError
from lemoncore.recipes import ModelInfo

SOURCES = ("user", "extra", "builtin")  # by precedence; no registered name starts with one


def registrable(name: str) -> str:
    """``name``, unless it starts with a source's prefix: a 400 that says so."""
    if name.partition(".")[0] in SOURCES:
        raise ModelError(
            f"{name!r}: the prefixes {', '.join(p + '.' for p in SOURCES)} are "
            "reserved (they name where a model comes from); register it without one",
            param="model_name",
        )
    return name


@dataclass(frozen=True)
class Naming:
    """``listed``: each model by its public id (its ``name`` set to the id); ``inputs``:
    the other names requests may use, to the id they mean."""

    listed: Mapping[str, ModelInfo]
    inputs: Mapping[str, str]

    def find(self, name: str) -> ModelInfo | None:
        """The model ``name`` means: a listed id, else an input name."""
        found = self.listed.get(name)
        if found is None and (target := self.inputs.get(name)) is not None:
            found = self.listed.get(target)
        return found


def name_models(sources: Mapping[str, Mapping[str, ModelInfo]]) -> Naming:
    """The public names of ``sources`` (source -> bare name -> model, sources as in
    :data:`SOURCES`)."""
    ids: dict[tuple[str, str], str] = {}  # (source, bare) -> public id
    winner: dict[str, str] = {}  # bare name -> the source that lists it bare
    inputs: dict[str, tuple[str, str]] = {}
    bares = dict.fromkeys(b for s in reversed(SOURCES) for b in sources.get(s, {}))
    for bare in bares:  # built-ins first, in their own order: listings keep it
        owners = [s for s in SOURCES if bare in sources.get(s, {})]
        winner[bare] = owners[0]
        ids[(owners[0], bare)] = bare
        inputs[f"{owners[0]}.{bare}"] = (owners[0], bare)
        for loser in owners[1:]:
            ids[(loser, bare)] = f"{loser}.{bare}"
    shadowed = {public for public in ids.values() if public not in winner}
    for source in SOURCES:
        for bare, model in sources.get(source, {}).items():
            for alias in model.aliases:
                if alias in winner:
                    if winner[alias] == "builtin" != source:
                        ids[("builtin", alias)] = f"builtin.{alias}"
                        del winner[alias]
                        inputs[alias] = (source, bare)
                elif alias not in shadowed:
                    inputs.setdefault(alias, (source, bare))
    listed = {
        public: sources[source][bare].model_copy(update={"name": public})
        for (source, bare), public in ids.items()
    }
    shown = {name: ids[key] for name, key in inputs.items() if name not in listed}
    return Naming(listed, shown)
