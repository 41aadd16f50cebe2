"""Install = pull by digest; every start verifies the local image against the pin."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from lemoncore.plugin import Installed, InstallError

from lemon_plugin_oci import model_label
from lemon_plugin_oci.engine import Engine, run
from lemon_plugin_oci.refs import ImageRef, carries


class ImageInstaller:
    def __init__(self, engine: Engine, ref: ImageRef, recipe: str, backend: str) -> None:
        self.engine, self.ref = engine, ref
        self.recipe, self.backend = recipe, backend

    async def install(self, on_progress: Callable[[int, int], None] | None) -> Installed:
        """Pull ``repository@digest``; return the image ID to check at every start and
        the models the image's label declares. An invalid label refuses the install (a
        launch would refuse it too) and removes the image."""
        if on_progress:
            on_progress(0, 0)
        code, _, err = await run(self.engine, "pull", "-q", self.ref.pinned)
        if code != 0:
            raise InstallError(
                f"pulling {self.ref} failed: {err.strip()[-400:]}. A pinned "
                "digest disappears when its tag is rebuilt and old builds are "
                "pruned: 'lemon lock refresh --check' says whether it is "
                "stale, and 'lemon lock refresh RECIPE:BACKEND --yes' pins "
                "what the tag names now"
            )
        image = await inspect_image(self.engine, self.ref)
        if image is None or not carries(image.get("RepoDigests") or [], self.ref):
            raise InstallError(
                f"{self.ref}: the pulled image does not carry the pinned digest; refused"
            )
        try:
            models = model_label.models(
                labels(image).get(model_label.LABEL, "[]"), self.recipe, self.backend, str(self.ref)
            )
        except ValueError as exc:
            await self.uninstall()
            raise InstallError(
                f"{self.ref}: label {model_label.LABEL} {exc}; the image cannot "
                "be used (its publisher must fix the label)"
            ) from None
        if on_progress:
            on_progress(1, 1)
        return Installed(str(image["Id"]), models)

    async def uninstall(self) -> None:
        await run(self.engine, "rmi", "--force", self.ref.pinned)


async def inspect_image(engine: Engine, ref: ImageRef) -> dict[str, Any] | None:
    code, out, _ = await run(engine, "image", "inspect", ref.pinned)
    if code != 0:
        return None
    data = json.loads(out)
    return data[0] if data else None


def labels(image: dict[str, Any]) -> dict[str, str]:
    """An inspected image's labels: podman has them at the top, docker in ``Config``."""
    found = image.get("Labels") or (image.get("Config") or {}).get("Labels") or {}
    return dict(found)


async def verified_image(
    engine: Engine, ref: ImageRef, image_id: str, backend: str
) -> dict[str, Any]:
    """The local image, if it still carries the pinned digest (``RepoDigests``) and the
    image ID recorded at install. A start never downloads: otherwise this refuses,
    naming the command that installs the image again."""
    image = await inspect_image(engine, ref)
    if (
        image is not None
        and carries(image.get("RepoDigests") or [], ref)
        and image.get("Id") == image_id
    ):
        return image
    what = "is missing" if image is None else "no longer matches the pinned digest and ID"
    raise InstallError(
        f"the local image {ref} {what} (image ID {image_id[:12]} was "
        f"installed); a start never downloads. Fetch it again: lemon "
        f"backends uninstall {backend} && lemon backends install {backend}"
    )
