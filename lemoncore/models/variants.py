"""Lemonade's ``owner/repo:VARIANT`` checkpoints: a variant that is not a file name
(``Q4_0``, ``UD-Q4_K_XL``, a shard folder, ``*``, or nothing) resolved against the
repository's file list into the file a model registers with and the shards beside it.

:func:`resolve` is the pure choice; :func:`resolve_checkpoint` asks the hub for the list
(the local snapshot when offline or unreachable). Source (lemonade-sdk/lemonade @e385039):
``identify_gguf_models`` (src/cpp/server/model_manager.cpp) for the order of the cases,
``enumerate_gguf_variants`` and ``quant_regex`` (src/cpp/server/hf_variants.cpp) for the
quant-named groups; where Lemonade throws, this says which variants the repo has."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from lemoncore.models.checkpoints import ModelError, snapshots_dir

# hf_variants.cpp quant_regex: a quant token between separators
_QUANT = re.compile(
    r"(?:^|[-._/])((?:UD[-_])?(?:Q\d+(?:_\d)?(?:_K)?(?:_(?:M|S|L|XL|XXL))?"
    r"|IQ\d+(?:_(?:M|S|L|XS|XXS|NL))?|F(?:16|32)|BF16|MXFP\d+(?:_MOE)?))"
    r"(?=[-._/]|\.gguf$|$)",
    re.IGNORECASE,
)
_SHARD = re.compile(r"^(.+)[-._]\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class GgufVariant:
    """A variant found in a repository: its name, the file a model starts from and every
    file it needs (shards included, sorted)."""

    name: str
    primary: str
    files: tuple[str, ...]


def _quant(text: str) -> str | None:
    found = _QUANT.search(text)
    return found.group(1).upper() if found else None


def _companion(path: str) -> bool:
    """An mmproj or draft-model GGUF: never a main model (hf_variants.cpp)."""
    name = path.rsplit("/", 1)[-1].lower()
    return "mmproj" in path.lower() or name.startswith(("dflash-", "mtp-")) or name == "dflash.gguf"


def gguf_variants(repo_files: Sequence[str]) -> list[GgufVariant]:
    """The repository's model variants (enumerate_gguf_variants): one per top-level
    folder, one per root shard series, named by quant token (by file stem when two
    series share one); root files with no quant token only when nothing else matched."""
    ggufs = sorted(f for f in repo_files if f.lower().endswith(".gguf") and not _companion(f))
    found: list[GgufVariant] = []
    folders: dict[str, list[str]] = defaultdict(list)
    series: dict[str, list[str]] = defaultdict(list)
    unmatched: list[str] = []
    for f in ggufs:
        if "/" in f.strip("/"):
            folders[f.split("/", 1)[0]].append(f)
        elif _quant(f) is None:
            unmatched.append(f)
        else:
            series[m.group(1) if (m := _SHARD.match(f)) else f].append(f)
    for folder, files in folders.items():
        found.append(GgufVariant(_quant(folder) or folder, files[0], tuple(files)))
    per_quant: dict[str, int] = defaultdict(int)
    for files in series.values():
        per_quant[_quant(files[0]) or ""] += 1
    for files in series.values():
        quant = _quant(files[0]) or ""
        name = quant if per_quant[quant] == 1 else files[0].rsplit(".", 1)[0]
        found.append(GgufVariant(name, files[0], tuple(files)))
    if not found:
        found = [GgufVariant(f, f, (f,)) for f in unmatched]
    return found


def resolve(repo: str, variant: str, repo_files: Sequence[str]) -> GgufVariant:
    """``variant`` of ``repo`` as identify_gguf_models chooses it: ``*`` every GGUF; an
    empty variant the first GGUF that is not an mmproj; a quant-named group (case
    insensitive); a single file ending ``<variant>.gguf``; the files of folder
    ``<variant>/`` (or one ending ``-<variant>/`` or ``_<variant>/``). A 400 naming the
    variants the repository has when none or several match."""
    ggufs = sorted(f for f in repo_files if f.lower().endswith(".gguf"))
    mains = [f for f in ggufs if "mmproj" not in f.lower()]
    want = variant.lower()
    if variant == "*":
        chosen = ggufs
    elif not variant:
        chosen = mains[:1]
    elif groups := [v for v in gguf_variants(repo_files) if v.name.lower() == want]:
        if len(groups) > 1:
            raise _ambiguous(repo, variant, [f for v in groups for f in v.files])
        return groups[0]
    elif ending := [f for f in mains if f.lower().endswith(f"{want}.gguf")]:
        if len(ending) > 1:
            raise _ambiguous(repo, variant, ending)
        chosen = ending
    else:
        chosen = [f for f in ggufs if f.lower().startswith(f"{want}/")] or [
            f
            for f in ggufs
            if "/" in f and f.split("/", 1)[0].lower().endswith((f"-{want}", f"_{want}"))
        ]
    if not chosen:
        names = ", ".join(v.name for v in gguf_variants(repo_files)) or "none"
        raise ModelError(
            f"{repo} has no GGUF variant {variant!r} (its variants: {names}); "
            f"name one, or a file: {repo}:file.gguf",
            param="checkpoint",
        )
    return GgufVariant(variant, chosen[0], tuple(chosen))


def _ambiguous(repo: str, variant: str, files: Sequence[str]) -> ModelError:
    return ModelError(
        f"{repo}: several GGUF files match variant {variant!r} ({', '.join(sorted(files))}); "
        f"name the file: {repo}:file.gguf",
        param="checkpoint",
    )


def needs_resolving(checkpoint: str) -> bool:
    """Whether ``checkpoint`` is a Hugging Face ``owner/repo`` with Lemonade's variant
    (``Q4_0``, ``BF16``, ``*``, or none) rather than a file (``owner/repo:file.gguf``;
    any name with a dot is a file, as every engine's weights have a suffix)."""
    if checkpoint.startswith(("pkg:", "file:", "/")):
        return False
    repo, _, variant = checkpoint.partition(":")
    return repo.count("/") == 1 and not {"/", "."} & set(variant)


def repo_files(repo: str, offline: bool) -> list[str]:
    """The files of ``repo`` (blocking): the hub's list, or when offline or the hub
    cannot answer, those of its snapshots in the local cache; a 502 if neither has any."""
    import huggingface_hub  # when used: plugins import this module

    failure = "offline"
    if not offline:
        try:
            return huggingface_hub.list_repo_files(repo)
        except huggingface_hub.errors.RepositoryNotFoundError:
            raise ModelError(
                f"the hub has no repository {repo} (or it is private)", status=404
            ) from None
        except Exception as exc:  # noqa: BLE001 - any hub failure falls back to the cache
            failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    snapshots = snapshots_dir(repo)
    cached = sorted(
        {
            p.relative_to(s).as_posix()
            for s in snapshots.glob("*")
            for p in s.rglob("*")
            if p.is_file()
        }
    )
    if cached:
        return cached
    raise ModelError(
        f"cannot list the files of {repo} ({failure}), and none are cached; "
        f"name the file instead: {repo}:file.gguf",
        status=502,
    )


def resolve_checkpoint(
    checkpoint: str, files: Sequence[str], offline: bool
) -> tuple[str, tuple[str, ...]]:
    """A Lemonade checkpoint as lemoncore registers it (blocking): ``owner/repo:file`` and
    the other files to fetch beside it (``files`` kept first); other forms unchanged."""
    if not needs_resolving(checkpoint):
        return checkpoint, tuple(files)
    repo, _, variant = checkpoint.partition(":")
    chosen = resolve(repo, variant, repo_files(repo, offline))
    extra = [f for f in chosen.files if f != chosen.primary and f not in files]
    return f"{repo}:{chosen.primary}", (*files, *extra)
