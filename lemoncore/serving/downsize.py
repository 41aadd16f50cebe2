"""Which idle servers give back what they hold without being unloaded: Lemonade's soft
idle ("downsize", EvictionEngine::evaluate_servers in src/cpp/server/eviction_engine.cpp),
one pure function over the policy's :class:`~lemoncore.serving.eviction.Resident`.

A server is downsized once it has been idle for its ``downsize_idle_timeout`` when
auto-eviction applies to it (its own ``auto_evict``, else the global setting), it is
neither pinned nor busy, and its engine can (``LaunchSpec.downsize``; llama.cpp erases
each slot's KV cache, as Lemonade's LlamaCppServer::downsize does). One downsize is tried
per idle spell: done or failed, the next is tried after the server's next request, which
needs nothing restored."""

from __future__ import annotations

from collections.abc import Sequence

from lemoncore.serving.eviction import Resident


def due(residents: Sequence[Resident], now: float, default: bool) -> tuple[Resident, ...]:
    """The servers to downsize now (``now`` on ``last_used``'s clock; ``default``: the
    global ``auto_evict``)."""
    return tuple(
        r
        for r in residents
        if r.can_downsize
        and not r.downsize_tried
        and not r.pinned
        and not r.busy
        and r.opted_in(default)
        and now - r.last_used >= r.residency.downsize_idle_timeout
    )
