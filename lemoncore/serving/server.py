"""The record of a running server (:class:`LoadedServer`): the process, the client to
it, the decisions made when it was loaded, and the counts the router keeps on it. The
bottom of the serving layer: of serving it imports only the policy's plain
:class:`~lemoncore.serving.eviction.Resident` and ``Residency`` (which import nothing from
serving), so
every other part may import it."""

from __future__ import annotations

import math
import time
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from lemoncore.launch import Downsize, Runner
from lemoncore.recipes import Backend, Device, ModelInfo, Recipe, SlotPolicy
from lemoncore.serving.eviction import Residency, Resident


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
    pins: Container[str] = frozenset()  # the router's pins: a pin is the model's, not ours
    in_flight: int = 0
    queued: int = 0
    failures: int = 0  # consecutive failed requests
    last_used: float = field(default_factory=time.monotonic)
    keep_alive: float = math.inf  # idle seconds before it is unloaded
    workers: tuple[str, ...] = ()  # the RPC workers it placed layers on
    answered: bool = False  # a request has ended since it was loaded
    drained: anyio.Event = field(default_factory=anyio.Event)
    gate: anyio.Semaphore | None = None  # the backend's max_concurrency, when it has one
    residency: Residency = field(default_factory=Residency)  # its auto-eviction options
    load_seconds: float = 1.0  # how long its start took
    downsize: Downsize | None = None  # what its engine gives back while idle, if it can
    downsized: bool = False  # it gave it back, and no request came since
    downsize_tried: bool = False  # since its last request (done, failed or interrupted)
    downsizing: anyio.CancelScope | None = None  # the downsize under way: a request ends it

    @property
    def pinned(self) -> bool:
        """Whether an administrator pinned this model: read from the router's pins, so a
        server started after a crash, a wedge or a reload shows the pin the model has."""
        return self.model.name in self.pins

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
            self.process.peak_memory(),
            self.load_seconds,
            self.residency,
            self.downsize is not None,
            self.downsize_tried,
        )
