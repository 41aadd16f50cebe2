"""The model store: the catalogue (from plugins), the models backends declare, the
models users register and those found in ``extra_models_dir``, by public name
(:mod:`~lemoncore.models.naming`) and alias; options saved per model; and where each
model's files live. A model file must resolve (symlinks followed) inside a directory
models come from: the store (``<cache_dir>/models``), the Hugging Face cache, a directory
of the ``model_dirs`` setting, ``extra_models_dir``, or (``pkg:``) its own package;
anything else is refused, so no caller can make ``/etc/passwd`` or ``~/.ssh`` a "model"
that an engine reads or a container mounts."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import huggingface_hub
import structlog
from huggingface_hub import constants as hf_constants
from pydantic import JsonValue, ValidationError

from lemoncore.jsonfile import read_json, write_json
from lemoncore.launch import ProgressCallback
from lemoncore.models import extra
from lemoncore.models.alias_book import AliasBook
from lemoncore.models.checkpoints import (
    Checkpoint,
    ModelError,
    cached_file,
    pkg_path,
    short,
    snapshot_revision,
)
from lemoncore.models.collections import Collection
from lemoncore.models.download import download
from lemoncore.models.naming import Naming, name_models, registrable
from lemoncore.models.variants import needs_resolving, resolve_checkpoint
from lemoncore.recipes import ModelInfo

log = structlog.get_logger("lemoncore.models")

RESCAN_AFTER = 2.0  # seconds a listing trusts the last look at extra_models_dir


class ModelStore:
    """Catalogue plus user models; resolves a name to its model and its local file."""

    def __init__(
        self,
        catalogue: Mapping[str, ModelInfo],
        cache_dir: Path,
        offline: bool = False,
        model_dirs: Sequence[Path] = (),
        declared: Callable[[], Mapping[str, ModelInfo]] = dict,
        extra_models_dir: Path | None = None,
    ) -> None:
        self.catalogue = dict(catalogue)
        self.declared = declared  # models installed backends declare (below the rest)
        self.cache_dir = cache_dir
        self.store = cache_dir / "models"
        self.model_dirs = tuple(model_dirs)
        self.user_file = cache_dir / "user_models.json"
        self.options_file = cache_dir / "model_options.json"
        self.offline = offline or os.environ.get("HF_HUB_OFFLINE", "") in {"1", "true", "ON"}
        self._user = _user_models(read_json(self.user_file, []))
        self.collections_file = cache_dir / "collections.json"
        self._collections = _collections(read_json(self.collections_file, []))
        self.aliases = AliasBook(cache_dir / "aliases.json")  # run-time aliases
        self._saved: dict[str, dict[str, JsonValue]] = read_json(self.options_file, {})
        self.extra_models_dir = extra_models_dir
        self._extra: dict[str, ModelInfo] = {}
        self._extra_at = -float("inf")
        self._naming: tuple[tuple[object, ...], Naming] | None = None

    def set_extra_models_dir(self, folder: Path | None) -> None:
        """Find models in ``folder`` from now on (``None``: nowhere). A folder that does
        not exist yet is accepted (it is looked at again on each listing); one that
        exists and cannot be listed is a 400 and nothing changes."""
        if folder is not None and folder.exists():
            try:
                with os.scandir(folder):
                    pass
            except OSError as exc:
                raise ModelError(
                    f"extra_models_dir {folder}: {exc.strerror or exc}; give a folder "
                    "lemoncore may list",
                    param="extra_models_dir",
                ) from None
        self.extra_models_dir = folder
        self._extra_at = -float("inf")

    def _extras(self, fresh: bool) -> dict[str, ModelInfo]:
        """The models of ``extra_models_dir``, looked at again when ``fresh`` and the last
        look is older than :data:`RESCAN_AFTER`; a folder that cannot be read has none
        (logged), and the other sources are untouched."""
        if fresh and time.monotonic() - self._extra_at > RESCAN_AFTER:
            self._extra_at = time.monotonic()
            try:
                self._extra = extra.discover(self.extra_models_dir) if self.extra_models_dir else {}
            except OSError as exc:
                log.warning("extra_models_dir unreadable", error=str(exc))
                self._extra = {}
        return self._extra

    def naming(self, fresh: bool = False) -> Naming:
        """Every model's public name (user over extra over built-in); recomputed only
        when a source changed."""
        declared, extras = self.declared(), self._extras(fresh)
        key = (declared, extras, self._user)  # each replaced, never changed in place
        cached = self._naming
        if cached is None or any(a is not b for a, b in zip(key, cached[0], strict=True)):
            own = {**self.catalogue, **self._user}
            aliases = {a for m in own.values() for a in m.aliases}
            builtin = {n: m for n, m in declared.items() if n not in aliases} | self.catalogue
            sources = {"user": self._user, "extra": extras, "builtin": builtin}
            cached = self._naming = (key, name_models(sources))
        return cached[1]

    def _write_user(self) -> None:
        write_json(self.user_file, [m.model_dump(mode="json") for m in self._user.values()])

    def saved_options(self, name: str) -> dict[str, JsonValue]:
        """Options saved for a model with ``/load {"save_options": true}``."""
        return self._saved.get(name, {})

    def save_options(self, name: str, options: Mapping[str, JsonValue]) -> None:
        self._saved[name] = {**self._saved.get(name, {}), **options}
        write_json(self.options_file, self._saved)

    def all(self) -> dict[str, ModelInfo]:
        """Every model by its public name (a declared model never shadows a catalogue or
        user one, nor their aliases); ``extra_models_dir`` looked at again if stale."""
        return dict(self.naming(fresh=True).listed)

    def get(self, name: str) -> ModelInfo | None:
        """The model ``name`` names: a public name, ``user.``/``extra.``/``builtin.`` and
        the name, an alias, else a run-time alias's target (``:latest`` ignored);
        ``extra_models_dir`` is looked at again first if stale, so a file there shadows a
        catalogue model at once."""
        name = name.removesuffix(":latest")
        naming = self.naming(fresh=True)
        target = self.aliases.resolve(name)  # a model's own name wins over an alias
        return naming.find(name) or (naming.find(target) if target else None)

    @staticmethod
    def named(model: ModelInfo) -> ModelInfo:
        """``model`` under the name it registers as: ``user.X`` named ``X``; a
        :class:`ModelError` for a name that cannot be registered."""
        return model.model_copy(update={"name": registrable(model.name.removeprefix("user."))})

    async def resolve(self, model: ModelInfo) -> ModelInfo:
        """``model`` as it registers (:meth:`named`), a Lemonade ``owner/repo:VARIANT``
        checkpoint made the file it names and the shards beside it
        (:mod:`~lemoncore.models.variants`: the hub's file list, the cache's when
        offline)."""
        model = self.named(model)  # before the hub is asked
        checkpoint, files = await anyio.to_thread.run_sync(
            resolve_checkpoint, model.checkpoint, model.files, self.offline
        )
        return model.model_copy(update={"checkpoint": checkpoint, "files": files})

    async def resolved(self, model: ModelInfo) -> ModelInfo:
        """``model``, a user model registered with a Lemonade variant resolved
        (:meth:`resolve`) and saved so: ``/models/register`` does not ask the hub, so such
        a model keeps its variant until it is first pulled or loaded. Other models are
        as declared."""
        mine = self._user.get(model.name)
        if (
            mine is None
            or mine.checkpoint != model.checkpoint
            or not needs_resolving(mine.checkpoint)
        ):
            return model
        found = await self.resolve(model)
        self.register(
            mine.model_copy(update={"checkpoint": found.checkpoint, "files": found.files})
        )
        return found

    def register(self, model: ModelInfo) -> None:
        """Register (or replace) a user model; one with a catalogue model's name shadows
        it, which stays reachable as ``builtin.<name>``."""
        registrable(model.name)
        cp = Checkpoint.parse(model.checkpoint)
        if cp.kind == "file":
            self.confined(Path(cp.location))
        elif cp.kind == "pkg":
            pkg_path(cp.location, registering=True)
        self._user = {**self._user, model.name: model}
        self._write_user()

    def unregister(self, name: str) -> None:
        """Forget a model the user registered (its files stay); others are left alone."""
        if name in self._user:
            self._user = {n: m for n, m in self._user.items() if n != name}
            self._write_user()

    def collections(self) -> list[Collection]:
        """The registered collections, in the order they were first registered."""
        return list(self._collections.values())

    def collection(self, name: str) -> Collection | None:
        """The collection ``name`` names: ``user.<name>`` or the bare name."""
        return self._collections.get(name.removesuffix(":latest").removeprefix("user."))

    def register_collection(self, collection: Collection) -> None:
        """Register (or replace) a collection; its components are not checked here
        (:func:`lemoncore.models.collections.refusal` is the gate)."""
        self._collections = {**self._collections, collection.name: collection}
        self._write_collections()

    def unregister_collection(self, name: str) -> None:
        """Forget a collection (its components stay)."""
        self._collections = {n: c for n, c in self._collections.items() if n != name}
        self._write_collections()

    def _write_collections(self) -> None:
        data = [c.model_dump(mode="json") for c in self._collections.values()]
        write_json(self.collections_file, data)

    def size_on_disk(self, model: ModelInfo) -> int | None:
        """The bytes the model's files take here, if they are all present; else ``None``."""
        path = self.local_path(model)
        if path is None:
            return None
        cp = Checkpoint.parse(model.checkpoint)
        if cp.kind == "hf":
            found = self._downloaded(model)
        else:
            found = [str(path), *(str(path.parent / f) for f in model.files)]
        return sum(Path(f).resolve().stat().st_size for f in found)

    def roots(self) -> tuple[Path, ...]:
        """Directories model files may lie in (besides a ``pkg:`` model's own package)."""
        extra_dir = (self.extra_models_dir,) if self.extra_models_dir else ()
        return (self.store, Path(hf_constants.HF_HUB_CACHE), *self.model_dirs, *extra_dir)

    def confined(self, path: Path) -> Path:
        """``path`` resolved, if it lies in one of :meth:`roots`; else a 403 (a 400 if the
        system refuses the path itself, as too long)."""
        real = path.resolve()
        try:
            real.exists()
        except OSError as exc:  # ENAMETOOLONG; exists() swallows only "not found" errors
            raise ModelError(f"{short(str(path))}: {exc.strerror}", param="checkpoint") from None
        if any(real.is_relative_to(root.resolve()) for root in self.roots()):
            return real
        raise ModelError(
            f"{path} is not in a directory models may come from "
            f"({', '.join(str(r) for r in self.roots())}). Move it into "
            f"{self.store}, or have an administrator add its directory to the "
            "setting model_dirs (LEMON_MODEL_DIRS)",
            status=403,
        )

    def owns(self, path: Path) -> bool:
        """Whether a resolved model file lies where lemoncore puts models (its cache, the
        Hugging Face cache it downloads into), not in an administrator's ``model_dirs``."""
        return any(
            path.is_relative_to(root.resolve())
            for root in (self.cache_dir, Path(hf_constants.HF_HUB_CACHE))
        )

    def local_path(self, model: ModelInfo) -> Path | None:
        """The model's file, resolved, if it and every file it needs beside it are present
        locally; else ``None``. A file outside the model directories is a
        :class:`ModelError` (403)."""
        cp = Checkpoint.parse(model.checkpoint)
        if cp.kind == "hf":
            found = cached_file(cp.location, cp.filename)
            path = self.confined(Path(found)) if isinstance(found, str) else None
            if isinstance(found, str) and not all(
                isinstance(
                    huggingface_hub.try_to_load_from_cache(
                        cp.location, f, revision=snapshot_revision(found, cp.filename)
                    ),
                    str,
                )
                for f in model.files
            ):
                return None
        elif cp.kind == "pkg":
            path = pkg_path(cp.location)
        else:
            path = self.confined(Path(cp.location))
            if not all((Path(cp.location).parent / f).exists() for f in model.files):
                return None
        return path if path is not None and path.is_file() else None

    def checkpoint_dir(self, model: ModelInfo) -> tuple[Path | None, tuple[Path, ...]]:
        """The directory holding the checkpoint as named (an HF snapshot's root, the file's
        folder, the package folder), for engines that read files beside it; and the
        resolved directories any such file must lie in."""
        cp = Checkpoint.parse(model.checkpoint)
        roots = tuple(root.resolve() for root in self.roots())
        if cp.kind == "hf":
            found = cached_file(cp.location, cp.filename)
            if not isinstance(found, str):
                return None, roots
            return Path(found).parents[len(Path(cp.filename).parts) - 1], roots
        if cp.kind == "pkg":
            path = pkg_path(cp.location)
            return (None, roots) if path is None else (path.parent, (*roots, path.parent))
        return Path(cp.location).parent, roots

    async def pull(self, model: ModelInfo, on_progress: ProgressCallback | None = None) -> Path:
        """Make the model's file present; report (bytes done, total) four times a second
        and once at the end."""
        model = await self.resolved(model)
        if (path := self.local_path(model)) is not None:
            return path
        cp = Checkpoint.parse(model.checkpoint)
        if cp.kind != "hf":
            raise ModelError(
                f"model {model.name!r}: {model.checkpoint!r} does not exist; "
                "install the package or fix the path",
                status=404,
            )
        if self.offline:
            raise ModelError(
                f"model {model.name!r} is not downloaded and lemoncore is "
                "offline; pull it with network access first"
            )
        return self.confined(Path(await download(model, cp, on_progress)))

    def deletable(self, model: ModelInfo) -> bool:
        """Whether :meth:`delete` removes something: a downloaded Hugging Face checkpoint
        (or part of one) or a model the user registered; a ``file:`` or ``pkg:``
        catalogue model is not lemoncore's to delete."""
        return bool(self._downloaded(model)) or model.name in self._user

    def delete(self, model: ModelInfo) -> None:
        """Remove the model's downloaded files and forget a user model; a model with
        neither is a :class:`ModelError` (422), with nothing changed."""
        found = self._downloaded(model)
        if not found and model.name not in self._user:
            cp = Checkpoint.parse(model.checkpoint)
            if self.extra_models_dir and Path(cp.location).is_relative_to(self.extra_models_dir):
                raise ModelError(
                    f"model {model.name!r} is a file of extra_models_dir, which lemoncore "
                    f"does not delete; delete it yourself: {cp.location}",
                    status=422,
                )
            raise ModelError(
                f"model {model.name!r} is not a download; nothing to delete", status=422
            )
        for path in found:
            self.confined(Path(path)).unlink(missing_ok=True)  # the blob
            Path(path).unlink(missing_ok=True)  # the snapshot's link to it
        self.unregister(model.name)

    def _downloaded(self, model: ModelInfo) -> list[str]:
        """The model's files in the Hugging Face cache (none unless its checkpoint is)."""
        cp = Checkpoint.parse(model.checkpoint)
        if cp.kind != "hf":
            return []
        first = cached_file(cp.location, cp.filename)
        if not isinstance(first, str):
            return []
        revision = snapshot_revision(first, cp.filename)
        rest = (
            huggingface_hub.try_to_load_from_cache(cp.location, name, revision=revision)
            for name in model.files
        )
        return [first, *(f for f in rest if isinstance(f, str))]


def _collections(entries: list[Any]) -> dict[str, Collection]:
    """The registered collections by name; an invalid entry is logged and left out."""
    found = {}
    for entry in entries:
        try:
            collection = Collection.model_validate(entry)
        except ValidationError as exc:
            log.warning("ignoring an invalid collection", entry=repr(entry)[:300], error=str(exc))
            continue
        found[collection.name] = collection
    return found


def _user_models(entries: list[Any]) -> dict[str, ModelInfo]:
    """The registered models by name; an entry that no longer validates (registered
    before a check was added, or edited by hand) is logged and left out, not fatal."""
    models = {}
    for entry in entries:
        try:
            model = ModelInfo.model_validate(entry)
        except ValidationError as exc:
            log.warning(
                "ignoring an invalid registered model", entry=repr(entry)[:300], error=str(exc)
            )
            continue
        models[model.name] = model
    return models
