"""What a tag points at now, asked of its registry over the distribution HTTP API
(``HEAD /v2/<name>/manifests/<tag>``, the digest in ``Docker-Content-Digest``), with the
anonymous bearer token Docker Hub and GHCR hand out (``WWW-Authenticate: Bearer realm=…``).
The ``refresher`` behind ``lemon lock refresh``: no pull, no container tool needed."""

from __future__ import annotations

import hashlib
import re

import httpx

from lemoncore.plugin import Artifact

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
LOOPBACK = {"127.0.0.1", "localhost", "[::1]"}


def manifest_url(repository: str, tag: str) -> str:
    host, _, path = repository.partition("/")
    if host == "docker.io":
        host = "registry-1.docker.io"
        path = path if "/" in path else f"library/{path}"
    scheme = "http" if host.rsplit(":", 1)[0] in LOOPBACK else "https"  # as docker does
    return f"{scheme}://{host}/v2/{path}/manifests/{tag}"


async def tag_digest(client: httpx.AsyncClient, repository: str, tag: str) -> str:
    """``sha256:<hex>`` of the manifest (or index) ``repository:tag`` names now."""
    url = manifest_url(repository, tag)
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    response = await client.head(url, headers=headers)
    if response.status_code == 401 and (
        challenge := response.headers.get("www-authenticate", "")
    ).lower().startswith("bearer "):
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", "")
        token = (await client.get(realm, params=params)).raise_for_status().json()
        headers["Authorization"] = f"Bearer {token.get('token') or token['access_token']}"
        response = await client.head(url, headers=headers)
    response.raise_for_status()
    digest = str(response.headers.get("docker-content-digest", ""))
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):  # then hash what it serves
        body = (await client.get(url, headers=headers)).raise_for_status().content
        digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
    return digest


class TagRefresher:
    """Pins ``repository:tag`` at the digest its registry names now."""

    def __init__(self, repository: str, tag: str) -> None:
        self.repository, self.tag = repository, tag

    async def latest(self) -> Artifact:
        async with httpx.AsyncClient(timeout=30, follow_redirects=True) as client:
            digest = await tag_digest(client, self.repository, self.tag)
        return Artifact(
            f"docker://{self.repository}:{self.tag}@{digest}",
            digest.removeprefix("sha256:"),
            extract=False,
            provenance=f"{manifest_url(self.repository, self.tag)} named {digest}",
        )
