"""Install = pull by digest; every start verifies the local image against the pin."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from lemoncore.install import InstallError

from lemon_plugin_oci.engine import Engine, run
from lemon_plugin_oci.refs import ImageRef


class ImageInstaller:
    def __init__(self, engine: Engine, ref: ImageRef) -> None:
        self.engine, self.ref = engine, ref

    async def install(self, on_progress: Callable[[int, int], None] | None) -> str:
        """Pull ``repository@digest``; return the image ID to check at every start."""
        if on_progress:
            on_progress(0, 0)
        code, _, err = await run(self.engine, "pull", "-q", self.ref.pinned)
        if code != 0:
            raise InstallError(f"pulling {self.ref} failed: {err.strip()[-400:]}")
        image = await inspect_image(self.engine, self.ref)
        if image is None or self.ref.pinned not in image.get("RepoDigests", []):
            raise InstallError(f"{self.ref}: the pulled image does not carry the pinned "
                               "digest; refused")
        if on_progress:
            on_progress(1, 1)
        return str(image["Id"])

    async def uninstall(self) -> None:
        await run(self.engine, "rmi", "--force", self.ref.pinned)


async def inspect_image(engine: Engine, ref: ImageRef) -> dict[str, Any] | None:
    code, out, _ = await run(engine, "image", "inspect", ref.pinned)
    if code != 0:
        return None
    data = json.loads(out)
    return data[0] if data else None


async def verified_image(engine: Engine, ref: ImageRef, image_id: str) -> dict[str, Any]:
    """The local image if it still matches the pin (RepoDigests membership and the image
    ID recorded at install); re-pulled once when it does not; else an error."""
    for attempt in (1, 2):
        image = await inspect_image(engine, ref)
        if image is not None and ref.pinned in image.get("RepoDigests", []) \
                and image.get("Id") == image_id:
            return image
        if attempt == 1:
            await run(engine, "pull", "-q", ref.pinned)
    raise InstallError(f"local image for {ref} does not match the pinned digest and image "
                       f"ID {image_id[:12]} even after a re-pull; reinstall the backend")
