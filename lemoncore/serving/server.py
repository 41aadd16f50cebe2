"""The record of a running server (:class:`LoadedServer`): the process, the client to
it, the decisions made when it was loaded, and the counts the router keeps on it. The
bottom of the serving layer: of serving it imports only the policy's plain
:class:`~lemoncore.serving.eviction.Resident` (which imports nothing from serving), so
every other part may import it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from lemoncore.launch import Runner
from lemoncore.recipes import Backend, Device, ModelInfo, Recipe, SlotPolicy
from lemoncore.serving.eviction import Resident


@dataclass
class LoadedServer:
    """A running backend with the decisions made when it was loaded."""

    model: ModelInfo
    recipe: Recipe
    backend: Backend
    options: dict[str, Any]
    device: Device
    is_amd_gpu: bool
    policy: SlotPolicy
    process: Runner
    client: httpx.AsyncClient
    pinned: bool = False
    in_flight: int = 0
    queued: int = 0
    failures: int = 0  # consecutive failed requests
    last_used: float = field(default_factory=time.monotonic)
    keep_alive: float = math.inf  # idle seconds before it is unloaded
    workers: tuple[str, ...] = ()  # the RPC workers it placed layers on
    answered: bool = False  # a request has ended since it was loaded
    drained: anyio.Event = field(default_factory=anyio.Event)
    gate: anyio.Semaphore | None = None  # the backend's max_concurrency, when it has one

    def resident(self) -> Resident:
        return Resident(self.model.name, self.model.model_type, self.device, self.is_amd_gpu,
                        self.policy, self.pinned, self.in_flight > 0, self.last_used,
                        self.keep_alive, self.workers, self.answered)

    def as_health(self) -> dict[str, Any]:
        return {"model_name": self.model.name, "checkpoint": self.model.checkpoint,
                "recipe": self.recipe.name, "backend": self.backend.name,
                "type": self.model.model_type.value, "device": self.device.value,
                "is_amd_gpu": self.is_amd_gpu, "slot_policy": self.policy.value,
                "backend_url": f"unix:{uds}" if (uds := getattr(self.process, "uds", None))
                else self.process.base_url, "pid": self.process.pid,
                "status": "busy" if self.in_flight else "ready", "pinned": self.pinned,
                "in_flight": self.in_flight, "queued": self.queued,
                "recipe_options": self.options,
                "launch_command": list(self.process.argv), "rpc_workers": list(self.workers),
                "peak_memory_bytes": self.process.peak_memory(),
                "idle_seconds": 0.0 if self.in_flight else
                round(time.monotonic() - self.last_used, 1),
                "keep_alive": None if math.isinf(self.keep_alive) else self.keep_alive,
                "unload_in_seconds": None if (until := self.resident().idle_until()) is None
                else round(max(0.0, until - time.monotonic()), 1)}
