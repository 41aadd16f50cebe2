"""Image references: only ``registry/namespace/repo:tag@sha256:<digest>`` from a trusted
namespace is accepted (the tag records provenance; the digest is what is pulled)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from lemoncore.launch import LaunchRefused

TRUSTED_NAMESPACES = ("docker.io/kyuz0/", "ghcr.io/peonist-ai/")
_REF = re.compile(r"^(?P<repo>[a-z0-9.:-]+(?:/[a-z0-9._-]+)+)(?::(?P<tag>[\w][\w.-]{0,127}))?"
                  r"@sha256:(?P<digest>[0-9a-f]{64})$")


@dataclass(frozen=True)
class ImageRef:
    repository: str
    tag: str
    digest: str  # "sha256:<hex>"

    @property
    def pinned(self) -> str:
        """What is pulled and run: the repository at the digest."""
        return f"{self.repository}@{self.digest}"

    def __str__(self) -> str:
        return f"{self.repository}:{self.tag}@{self.digest}"


def parse_ref(text: str, trusted: Iterable[str] = TRUSTED_NAMESPACES) -> ImageRef:
    """Parse and vet a pin; refuse tag-only refs and untrusted namespaces, saying why."""
    text = text.removeprefix("docker://")
    match = _REF.match(text)
    if match is None:
        raise LaunchRefused(f"image {text!r} is not pinned as registry/namespace/repo:tag@"
                            "sha256:<64 hex>; lemoncore runs images by digest only")
    repo = match["repo"]
    if "." not in repo.split("/")[0] and ":" not in repo.split("/")[0]:
        raise LaunchRefused(f"image {text!r} has no registry host; short names are refused")
    if not any(repo.startswith(ns) for ns in trusted):
        raise LaunchRefused(f"image {text!r} is outside the trusted namespaces "
                            f"({', '.join(trusted)}); an administrator can add one with "
                            "recipes.oci.trusted_namespaces")
    return ImageRef(repo, match["tag"] or "", f"sha256:{match['digest']}")
