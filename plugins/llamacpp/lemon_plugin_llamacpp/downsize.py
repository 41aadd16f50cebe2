"""llama.cpp's downsize, as Lemonade's LlamaCppServer::downsize does it
(src/cpp/server/backends/llamacpp/llamacpp_server.cpp): erase the KV cache of every
slot, through llama-server's ``GET /slots`` and ``POST /slots/{id}?action=erase``
(tools/server/server-context.cpp ``post_slots``). llama-server answers every slot action
501 unless it was started with ``--slot-save-path``, which must name an existing
directory (common/arg.cpp): :func:`slot_dir` is that directory, private and empty
(lemoncore serves only ``erase`` to clients, so nothing is ever saved there).

What it gives back is the cached prompts, not memory: llama.cpp keeps its KV buffer
allocated, so the process's resident memory stays where it was."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

_SLOT_DIR: list[Path] = []


def slot_dir() -> Path:
    """This lemoncore process's ``--slot-save-path`` (mode 0700), made again if something
    (a temporary files cleaner) removed it."""
    if not _SLOT_DIR or not _SLOT_DIR[0].is_dir():
        _SLOT_DIR[:] = [Path(tempfile.mkdtemp(prefix="lemon-slots-"))]
    return _SLOT_DIR[0]


async def erase_slots(client: httpx.AsyncClient) -> None:
    """Erase every slot's KV cache. Raises, erasing nothing, when a slot is still
    processing (an abandoned answer the engine is finishing: its erase would wait for it),
    and on an answer that is not llama-server's slot list or an erase it refused."""
    slots = (await client.get("/slots")).raise_for_status().json()
    if not isinstance(slots, list) or not all(
        isinstance(s, dict) and isinstance(s.get("id"), int) for s in slots
    ):
        raise ValueError("GET /slots answered something other than llama-server's slot list")
    if busy := [s["id"] for s in slots if s.get("is_processing")]:
        raise RuntimeError(f"slots {busy} are still processing")
    for slot in slots:
        erased = await client.post(f"/slots/{slot['id']}", params={"action": "erase"}, json={})
        erased.raise_for_status()
