"""The RPC workers a load places layers on: which of them loaded servers hold, and the
check that each answers llama.cpp's RPC handshake before the load goes on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import anyio

from lemoncore.rpc import WorkerProbe, probe_worker
from lemoncore.serving.refusals import RouterError
from lemoncore.serving.server import LoadedServer

WORKER_PROBE_TIMEOUT = 2.0  # seconds for an RPC worker's TCP connect and handshake


def split_held(
    workers: Sequence[str], servers: Iterable[LoadedServer]
) -> tuple[list[str], list[str]]:
    """``workers`` as (free, held by a loaded server), each in order."""
    held = {w for s in servers for w in s.workers}
    return [w for w in workers if w not in held], [w for w in workers if w in held]


async def require_workers(model: str, workers: Sequence[str]) -> None:
    """Refuse the load of ``model`` (503 ``worker_unavailable``, ``Retry-After``), naming
    each, when one of ``workers`` does not answer the RPC handshake within
    :data:`WORKER_PROBE_TIMEOUT`; all are probed at once. Probe a worker a loaded server
    holds only once it is freed: it serves one client at a time, so a probe would wait out
    its timeout."""
    probes: list[WorkerProbe] = []

    async def probe(worker: str) -> None:
        probes.append(await probe_worker(worker, WORKER_PROBE_TIMEOUT))

    async with anyio.create_task_group() as tg:
        for worker in workers:
            tg.start_soon(probe, worker)
    if failed := [p.error for p in probes if not p.ok]:
        raise RouterError(
            f"cannot load {model!r}: {'; '.join(map(str, failed))}",
            503,
            "server_error",
            "worker_unavailable",
            retry_after=5,
        )
