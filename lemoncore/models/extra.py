"""Models found in a folder of GGUF files (the ``extra_models_dir`` setting: llama.cpp's
cache, LM Studio's models folder), as Lemonade's spec has it (src/cpp/Extra-Models-Dir-
Spec.md; ``ModelManager::discover_extra_models`` and ``discover_extra_models_in_directory``
in model_manager.cpp).

- A GGUF in the folder itself is a model named by its file's stem.
- A sub-folder's GGUFs are one model named by the sub-folder, unless every file belongs
  to a variant named by a quantization (:func:`lemoncore.models.variants.gguf_variants`) and
  there are several: then each variant is a model, named by its first file's stem less
  any shard suffix, and the sub-folder's name (bare and ``extra.``) is an alias of the
  first variant by name.
- A file with ``mmproj`` in its name is never a model: the first by name goes with each
  model of its folder (label ``vision``).
- A name already found is qualified with its folder (``<folder>-<name>``, then ``-2``…),
  folders taken in sorted order, so names are stable across restarts.

:func:`group` decides over file names alone; :func:`discover` reads the folder. Models are
named bare: :mod:`lemoncore.models.naming` gives them their public ids."""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import structlog
from pydantic import ValidationError

from lemoncore.models.variants import gguf_variants
from lemoncore.recipes import ModelInfo

log = structlog.get_logger("lemoncore.models")

MAX_FILES = 10_000  # GGUFs read from one folder tree; the rest are left out, with a warning
_SHARD_SUFFIX = re.compile(r"[-._]00001-of-\d{5}$", re.IGNORECASE)


@dataclass(frozen=True)
class Found:
    """One model: its bare name, its first file and the files beside it (paths relative to
    the scanned folder, ``/``-separated), its sub-folder aliases."""

    name: str
    primary: str
    files: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()

    @property
    def mmproj(self) -> str | None:
        return next((f for f in self.files if "mmproj" in f.lower()), None)


def group(paths: Sequence[str]) -> list[Found]:
    """The models ``paths`` (GGUF files relative to the scanned folder) hold."""
    found: list[Found] = []
    folders: dict[str, list[str]] = defaultdict(list)
    for path in sorted(paths):
        folder, _, name = path.rpartition("/")
        if folder:
            folders[folder].append(name)
        elif "mmproj" not in name.lower():
            found.append(Found(PurePosixPath(name).stem, name))
    for folder, names in sorted(folders.items()):
        found += _folder_models(folder, names)
    return _unique(found)


def _folder_models(folder: str, names: list[str]) -> list[Found]:
    projectors = sorted(n for n in names if "mmproj" in n.lower())
    mains = sorted(n for n in names if "mmproj" not in n.lower())
    if not mains:
        return []
    extra = tuple(f"{folder}/{p}" for p in projectors[:1])
    found = gguf_variants(mains)
    split = (
        len(found) > 1
        and all(v.name != v.primary for v in found)
        and sum(len(v.files) for v in found) == len(mains)
    )
    dir_name = folder.rsplit("/", 1)[-1]
    if not split:
        rest = tuple(f"{folder}/{n}" for n in mains[1:])
        return [Found(dir_name, f"{folder}/{mains[0]}", rest + extra)]
    models = []
    for v in found:
        aliases = (dir_name, f"extra.{dir_name}") if v.primary == mains[0] else ()
        rest = tuple(f"{folder}/{n}" for n in v.files if n != v.primary)
        name = _SHARD_SUFFIX.sub("", PurePosixPath(v.primary).stem)
        models.append(Found(name, f"{folder}/{v.primary}", rest + extra, aliases))
    return models


def _unique(found: list[Found]) -> list[Found]:
    """``found`` with each name taken once (add_extra_model): a later model with a taken
    name is qualified with its folder."""
    names: set[str] = set()
    out = []
    for model in found:
        name = model.name
        if name in names:
            folder = PurePosixPath(model.primary).parent.name
            name = qualified = f"{folder}-{model.name}"
            n = 2
            while name in names:
                name, n = f"{qualified}-{n}", n + 1
        names.add(name)
        out.append(Found(name, model.primary, model.files, model.aliases))
    return out


def discover(root: Path) -> dict[str, ModelInfo]:
    """The models of the folder ``root``, by bare name; none if it does not exist or is
    not a folder. Unreadable sub-folders are skipped; a file whose name cannot be a model
    name is logged and left out."""
    if not root.is_dir():
        return {}
    models = {}
    for found in group(list(_ggufs(root))):
        primary = root / found.primary
        try:
            model = ModelInfo(
                name=found.name,
                recipe="llamacpp",
                checkpoint=str(primary) if primary.is_absolute() else f"file:{primary}",
                files=tuple(os.path.relpath(root / f, primary.parent) for f in found.files),
                labels=("custom", "vision") if found.mmproj else ("custom",),
                aliases=found.aliases,
                suggested=True,
            )
        except ValidationError as exc:
            log.warning("extra model left out", file=str(primary), error=str(exc)[:300])
            continue
        models[model.name] = model
    return models


def _ggufs(root: Path) -> Iterator[str]:
    """The ``.gguf`` files under ``root``, relative and ``/``-separated, at most
    :data:`MAX_FILES`; symbolic links to folders are not followed."""
    count = 0
    for folder, dirs, files in os.walk(root, onerror=lambda exc: None):
        dirs.sort()
        for name in sorted(files):
            if name.lower().endswith(".gguf") and os.path.isfile(os.path.join(folder, name)):
                if count == MAX_FILES:
                    log.warning("extra_models_dir has too many GGUFs", root=str(root))
                    return
                count += 1
                yield Path(folder, name).relative_to(root).as_posix()
