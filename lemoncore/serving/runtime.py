"""Settings that may change while the server runs (Lemonade's ``POST /internal/set``,
``Server::handle_config_set`` and ``RuntimeConfig::validate`` in
src/cpp/server/server.cpp and runtime_config.cpp): :class:`RuntimeChange` is what an
administrator may send, :class:`RuntimeConfig` what is in force, and :func:`plan_change`
the pure decision of what a change does, the evictions it implies included (a lowered
``max_loaded_models`` evicts at once, where Lemonade waits for the next load). The router
applies a plan under its load lock (:meth:`~lemoncore.serving.router.Router.configure`).
Everything else (host, port, keys, directories) is start-up only: restart to change it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lemoncore.errors import LemonError
from lemoncore.serving.eviction import Decision, Resident, over_capacity
from lemoncore.settings import EvictionSettings, Settings

LogLevel = Literal["debug", "info", "warning", "error"]


class BackendUnusable(LemonError):
    """The llama.cpp backend a change names is unknown or cannot load on this host."""

    status, code = 400, "backend_unusable"


class RuntimeChange(BaseModel):
    """What may change at run time; a field left out stays as it is."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_loaded_models: int | None = Field(None, ge=-1, description="Per model type; -1: unlimited")
    ctx_size: int | None = Field(None, ge=-1, description="llama.cpp's default context; -1: auto")
    llamacpp_backend: str | None = Field(
        None, max_length=64, description="The llama.cpp backend new loads use ('auto': choose)"
    )
    log_level: LogLevel | None = None
    extra_models_dir: str | None = Field(
        None, max_length=4096, description="The folder of extra. models; '': none"
    )
    auto_evict: bool | None = None
    auto_evict_threshold_pct: float | None = Field(None, gt=0, le=1)
    evict_idle_timeout: float | None = Field(None, ge=0)
    downsize_idle_timeout: float | None = Field(None, ge=0)
    evict_weight_factor: float | None = Field(None, gt=0)

    @field_validator("max_loaded_models")
    @classmethod
    def _not_zero(cls, value: int | None) -> int | None:
        if value == 0:
            raise ValueError("must be -1 (unlimited) or a positive integer")
        return value

    def given(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


@dataclass(frozen=True)
class RuntimeConfig:
    """The run-time settings in force (``GET /internal/config`` shows them)."""

    max_loaded_models: int
    ctx_size: int | None  # None: the recipe's own default
    llamacpp_backend: str | None  # None: chosen per host
    log_level: LogLevel
    eviction: EvictionSettings
    extra_models_dir: str = ""  # "": none

    @classmethod
    def of(cls, settings: Settings) -> RuntimeConfig:
        llamacpp = settings.recipes.get("llamacpp", {})
        ctx, backend = llamacpp.get("ctx_size"), llamacpp.get("backend")
        return cls(
            settings.max_loaded_models,
            ctx if isinstance(ctx, int) else None,
            backend if isinstance(backend, str) else None,
            settings.log_level,
            settings.eviction,
            str(settings.extra_models_dir or ""),
        )

    def shown(self) -> dict[str, Any]:
        eviction = self.eviction.model_dump()
        return {
            "max_loaded_models": self.max_loaded_models,
            "ctx_size": -1 if self.ctx_size is None else self.ctx_size,
            "llamacpp": {"backend": self.llamacpp_backend or "auto"},
            "log_level": self.log_level,
            "extra_models_dir": self.extra_models_dir,
            **{k: v for k, v in eviction.items() if k != "interval"},
        }


@dataclass(frozen=True)
class RuntimePlan:
    """What a change does: the configuration after it, what it changed, the evictions it
    implies (in order), and the llama.cpp section new loads use when it changed."""

    config: RuntimeConfig
    changed: Mapping[str, Any]
    evict: Decision
    llamacpp_section: Mapping[str, object] | None = None


def plan_change(
    current: RuntimeConfig,
    change: RuntimeChange,
    residents: Sequence[Resident],
    llamacpp_section: Mapping[str, object],
    llamacpp_backends: Mapping[str, str],
) -> RuntimePlan:
    """The plan for ``change`` over ``current``: a backend not among
    ``llamacpp_backends`` (the recipe's, each with why it cannot load here, "" when it
    can: installed or installable without a person's action) is
    :class:`BackendUnusable`, as Lemonade's ``validate_backend_choice`` refuses a backend
    this system does not support, and nothing changes; a lowered
    ``max_loaded_models`` evicts the least recently used unpinned servers beyond it
    (:func:`~lemoncore.serving.eviction.over_capacity`); ``ctx_size`` and the backend
    apply to the next loads (a loaded model keeps its options until it reloads)."""
    given = change.given()
    backend = given.get("llamacpp_backend")
    if backend is not None and backend != "auto" and backend not in llamacpp_backends:
        usable = ", ".join(b for b, why in llamacpp_backends.items() if not why) or "none"
        raise BackendUnusable(
            f"llamacpp_backend {backend!r} is not a llama.cpp backend; choose 'auto' or one "
            f"of {usable}"
        )
    if backend is not None and (why := llamacpp_backends.get(backend)):
        raise BackendUnusable(f"llamacpp_backend {backend!r} cannot load here: {why}")
    changed = {
        k: v
        for k, v in given.items()
        if getattr(current, k, getattr(current.eviction, k, None)) != v
        and not (k == "llamacpp_backend" and v == "auto" and current.llamacpp_backend is None)
        and not (k == "ctx_size" and v == -1 and current.ctx_size is None)
    }
    eviction = current.eviction.model_copy(
        update={k: v for k, v in changed.items() if k in EvictionSettings.model_fields}
    )
    config = replace(
        current,
        max_loaded_models=changed.get("max_loaded_models", current.max_loaded_models),
        ctx_size=_unset(changed.get("ctx_size", current.ctx_size), -1),
        llamacpp_backend=_unset(changed.get("llamacpp_backend", current.llamacpp_backend), "auto"),
        log_level=changed.get("log_level", current.log_level),
        extra_models_dir=changed.get("extra_models_dir", current.extra_models_dir),
        eviction=eviction,
    )
    section = None
    if "ctx_size" in changed or "llamacpp_backend" in changed:
        section = {
            k: v for k, v in llamacpp_section.items() if k not in {"ctx_size", "backend"}
        } | {
            k: v
            for k, v in (("ctx_size", config.ctx_size), ("backend", config.llamacpp_backend))
            if v is not None
        }
    lowered = config.max_loaded_models != current.max_loaded_models
    evict = over_capacity(residents, config.max_loaded_models) if lowered else Decision()
    return RuntimePlan(config, changed, evict, section)


def _unset(value: Any, unset: object) -> Any:
    return None if value == unset else value
