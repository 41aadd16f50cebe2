"""Models an image declares in its ``org.lemonade.models`` label. Pure functions over data.

The label is a JSON list, at most ``MAX_LABEL`` characters and ``MAX_MODELS`` entries::

    [{"name": "Qwen3-Small-Halogen",
      "checkpoint": "owner/repo:weights.hgn",
      "files": {"weights.hgn": {"size": 123456, "sha256": "<64 hex>"},
                "tokenizer/tokenizer.json": {"size": 2048, "sha256": "<64 hex>"}},
      "labels": ["chat"], "description": "..."}]

An entry with ``checkpoint`` declares an installable model: a Hugging Face checkpoint
whose every file (the checkpoint's own included) has a published size and SHA-256, which
the core checks when a user pulls it. Reading the label runs nothing and fetches nothing.
An entry of Lemonade's earlier form, ``{"name", "path": "/models/<file>"}``, is checked
and declares nothing (the recipe's launch contract decides the mounts). Anything else
(a local path, a URL, a file without a hash, an unknown key) makes the label invalid.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

from pydantic import ValidationError

from lemoncore.plugin import ModelInfo

from lemon_plugin_oci.contracts import MODELS_DIR

LABEL = "org.lemonade.models"
MAX_LABEL, MAX_MODELS, MAX_FILES = 16384, 16, 64
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
KEYS = {"name", "path", "checkpoint", "files", "labels", "description"}


def parse(text: str) -> list[dict[str, Any]]:
    """The label's entries, checked; a ``ValueError`` says what is wrong."""
    if len(text) > MAX_LABEL:
        raise ValueError(f"is longer than {MAX_LABEL} characters")
    try:
        entries = json.loads(text)
    except ValueError:
        raise ValueError("is not JSON") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError("is not a list of objects")
    if len(entries) > MAX_MODELS:
        raise ValueError(f"declares more than {MAX_MODELS} models")
    names = [e.get("name") for e in entries]
    if len(set(map(str, names))) != len(names):
        raise ValueError("names must be unique")
    for entry in entries:
        _check(entry)
    return entries


def _check(entry: dict[str, Any]) -> None:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("every entry needs a name")
    if unknown := set(entry) - KEYS:
        raise ValueError(f"{name}: unknown keys {', '.join(sorted(unknown))}")
    path = entry.get("path")
    if path is not None and (
        not isinstance(path, str)
        or not path.startswith(MODELS_DIR + "/")
        or posixpath.normpath(path) != path
        or ".." in path
    ):
        raise ValueError(f"{name}: path must be normalised, under {MODELS_DIR}/, with no '..'")
    if "checkpoint" not in entry and "files" not in entry:
        return
    checkpoint, files = entry.get("checkpoint"), entry.get("files")
    repo, _, first = checkpoint.partition(":") if isinstance(checkpoint, str) else ("", "", "")
    if not REPO.match(repo) or not first:
        raise ValueError(f"{name}: checkpoint must be a Hugging Face 'owner/repo:file'")
    if not isinstance(files, dict) or first not in files or len(files) > MAX_FILES:
        raise ValueError(
            f"{name}: files must map each file, the checkpoint's {first!r} "
            f"included (at most {MAX_FILES}), to its size and sha256"
        )
    for file, meta in files.items():
        size = meta.get("size") if isinstance(meta, dict) else None
        sha = meta.get("sha256") if isinstance(meta, dict) else None
        if (
            type(size) is not int
            or size <= 0
            or not isinstance(sha, str)
            or not HEX64.match(sha)
            or set(meta) - {"size", "sha256"}
        ):
            raise ValueError(
                f"{name}: file {file!r} needs a positive integer size and a "
                "sha256 of 64 lowercase hex digits"
            )
    labels, description = entry.get("labels", []), entry.get("description", "")
    if (
        not isinstance(labels, list)
        or len(labels) > 8
        or not all(isinstance(x, str) and 0 < len(x) <= 32 for x in labels)
    ):
        raise ValueError(f"{name}: labels must be at most 8 short strings")
    if not isinstance(description, str) or len(description) > 500:
        raise ValueError(f"{name}: description must be a string of at most 500 characters")


def models(
    text: str, recipe: str = "", backend: str = "", image: str = ""
) -> tuple[ModelInfo, ...]:
    """The installable models the label declares, as catalogue entries of ``recipe`` that
    load on ``backend``; a ``ValueError`` says what is wrong with the label."""
    found = []
    for entry in parse(text):
        if "checkpoint" not in entry:
            continue
        files = entry["files"]
        first = entry["checkpoint"].partition(":")[2]
        try:
            found.append(
                ModelInfo(
                    name=entry["name"],
                    recipe=recipe,
                    checkpoint=entry["checkpoint"],
                    files=tuple(f for f in files if f != first),
                    sha256={f: m["sha256"] for f, m in files.items()},
                    sizes={f: m["size"] for f, m in files.items()},
                    labels=tuple(entry.get("labels", ())),
                    recipe_options={"backend": backend},
                    description=" ".join(
                        filter(
                            None, (entry.get("description", ""), f"Declared by the image {image}.")
                        )
                    ),
                )
            )
        except ValidationError as exc:  # a name or file path ModelInfo refuses
            why = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"{entry['name']}: {why}") from None
    return tuple(found)
