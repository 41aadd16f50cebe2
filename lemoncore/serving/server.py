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
        return Resident(
            self.model.name,
            self.model.model_type,
            self.device,
            self.is_amd_gpu,
            self.policy,
            self.pinned,
            self.in_flight > 0,
            self.last_used,
            self.keep_alive,
            self.workers,
            self.answered,
        )
