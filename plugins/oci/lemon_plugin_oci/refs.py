"""Image references: only ``registry/namespace/repo:tag@sha256:<digest>`` from a trusted
namespace is accepted (the tag records provenance; the digest is what is pulled)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from lemoncore.plugin import LaunchRefused

TRUSTED_NAMESPACES = ("docker.io/kyuz0/", "ghcr.io/peonist-ai/")
# distribution/reference's grammar (reference/regexp.go): a domain, then path components
# of lower-case alphanumerics joined by single separators, so no ".." segment can pass
_DOMAIN = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REF = re.compile(
    rf"(?P<repo>{_DOMAIN}(?:/{_COMPONENT})+)(?::(?P<tag>\w[\w.-]{{0,127}}))?"
    r"@sha256:(?P<digest>[0-9a-f]{64})",
    re.ASCII,
)


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


_TAGGED = re.compile(
    rf"(?P<repo>{_DOMAIN}(?:/{_COMPONENT})+):(?P<tag>\w[\w.-]{{0,127}})"
    r"(?:@sha256:[0-9a-f]{64})?",
    re.ASCII,
)


def parse_tagged(text: str, trusted: Iterable[str] = TRUSTED_NAMESPACES) -> tuple[str, str]:
    """``(repository, tag)`` of a pin that names a tag (with or without a digest), from a
    trusted namespace: what ``lemon lock refresh`` asks the registry about."""
    match = _TAGGED.fullmatch(text.removeprefix("docker://"))
    if match is None:
        raise LaunchRefused(f"image {text!r} names no tag to refresh")
    _trusted(match["repo"], text, trusted)
    return match["repo"], match["tag"]


def _trusted(repo: str, text: str, trusted: Iterable[str]) -> None:
    namespaces = [ns.rstrip("/") + "/" for ns in trusted]  # "ghcr.io/peon" is no prefix
    if not any(repo.startswith(ns) for ns in namespaces):
        raise LaunchRefused(
            f"image {text!r} is outside the trusted namespaces "
            f"({', '.join(namespaces)}); an administrator can add one with "
            "recipes.<recipe>.trusted_namespaces"
        )


def parse_ref(text: str, trusted: Iterable[str] = TRUSTED_NAMESPACES) -> ImageRef:
    """Parse and vet a pin; refuse tag-only refs and untrusted namespaces, saying why."""
    text = text.removeprefix("docker://")
    match = _REF.fullmatch(text)
    if match is None:
        raise LaunchRefused(
            f"image {text!r} is not pinned as registry/namespace/repo:tag@"
            "sha256:<64 hex>; lemoncore runs images by digest only"
        )
    repo = match["repo"]
    if "." not in repo.split("/")[0] and ":" not in repo.split("/")[0]:
        raise LaunchRefused(f"image {text!r} has no registry host; short names are refused")
    _trusted(repo, text, trusted)
    return ImageRef(repo, match["tag"] or "", f"sha256:{match['digest']}")


def normalised(name: str) -> str:
    """A reference in full: docker reports Docker Hub names in their familiar form
    (``kyuz0/x@sha256:…``, ``ubuntu@sha256:…``; distribution/reference normalize.go
    ``familiarizeName``), podman in full (``docker.io/kyuz0/x@sha256:…``)."""
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        name = f"docker.io/{name}"
    if name.startswith("docker.io/") and "/" not in name.removeprefix("docker.io/"):
        name = "docker.io/library/" + name.removeprefix("docker.io/")
    return name


def carries(repo_digests: list[str], ref: ImageRef) -> bool:
    """Whether an image's ``RepoDigests`` include ``ref``'s repository at its digest."""
    want = normalised(ref.pinned)
    return any(normalised(entry) == want for entry in repo_digests)
