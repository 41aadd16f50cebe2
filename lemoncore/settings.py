"""Settings: defaults < config file (TOML) < ``LEMON_*`` environment < CLI flags.

The config file is ``$LEMON_CONFIG_FILE``, else ``config.toml`` in the OS's config
directory (``$XDG_CONFIG_HOME/lemoncore``, ``~/Library/Application Support/lemoncore``,
``%APPDATA%\\lemoncore``: :func:`lemoncore.platforms.default_dirs`).
Nested values in the environment use ``__``: ``LEMON_RECIPES__LLAMACPP__CTX_SIZE=8192``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from lemoncore.durations import KeepAlive
from lemoncore.platforms import default_dirs
from lemoncore.recipes import ModelInfo
from lemoncore.rpc import parse_workers


def _dirs() -> tuple[Path, Path]:
    return default_dirs()


def default_config_file() -> Path:
    return Path(os.environ.get("LEMON_CONFIG_FILE") or _dirs()[0] / "config.toml")


class EvictionSettings(BaseModel):
    """Auto-eviction (Lemonade's options, RuntimeConfig and recipe_options.cpp defaults):
    the global defaults a load's own options override; changeable at run time."""

    model_config = ConfigDict(extra="forbid")

    auto_evict: bool = Field(False, description="Evict idle or memory-hungry models on its own.")
    auto_evict_threshold_pct: float = Field(
        0.9, gt=0, le=1, description="Used host memory (a fraction) that counts as pressure."
    )
    evict_idle_timeout: float = Field(300.0, ge=0, description="Idle seconds before eviction.")
    downsize_idle_timeout: float = Field(
        60.0,
        ge=0,
        description="Idle seconds before an engine that can gives back what it holds "
        "(llama.cpp: its KV cache); the model stays loaded.",
    )
    evict_weight_factor: float = Field(1.0, gt=0, description="Higher: kept longer under pressure.")
    interval: float = Field(5.0, gt=0, description="Seconds between evaluations (Lemonade: 5).")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LEMON_", env_nested_delimiter="__", extra="ignore"
    )

    host: str = Field("127.0.0.1", description="Address to bind; loopback by default.")
    api_key: SecretStr | None = Field(None, description="Required by every API route.")
    admin_api_key: SecretStr | None = Field(
        None,
        description="Required by the management routes (load, unload, pull, models/register, "
        "delete, install, uninstall, logs, events, shutdown); default: api_key.",
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        description="Web origins whose pages may call the API (CORS "
        "and the browser boundary); none by default.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names served besides loopback names, IP "
        "literals and this machine's name (DNS-rebinding defence); '*' serves any.",
    )
    allow_remote_admin: bool = Field(
        False,
        description="Let non-loopback clients use management routes while no admin key is set.",
    )
    model_dirs: list[Path] = Field(
        default_factory=list,
        description="Directories whose files may be models (file: "
        "checkpoints), besides lemoncore's model store and the Hugging Face cache.",
    )
    extra_models_dir: Path | None = Field(
        None,
        description="A folder of GGUF files (llama.cpp's cache, LM Studio's models) "
        "whose models are listed as `extra.` models; its files may be models too. "
        "Settable at run time (`/internal/set`).",
    )
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="Largest request body.")
    body_timeout: float = Field(
        120.0,
        gt=0,
        description="Seconds a request body may keep the server waiting, in "
        "all, before a 408 closes the connection (32 MiB in 120 s needs ~2.3 Mbit/s).",
    )
    head_timeout: float = Field(
        5.0,
        gt=0,
        description="Seconds a connection may take to send a request head, and "
        "stay idle between requests, before it is closed.",
    )
    max_header_bytes: int = Field(
        16 * 1024, ge=1024, description="Largest request line plus headers (431 over it)."
    )
    max_answer_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Most of an engine's answer held at once: a "
        "non-streamed answer, or one event of a stream lemoncore translates; more is a 502.",
    )
    port: int = Field(13305, ge=0, le=65535)
    cache_dir: Path = Field(
        default_factory=lambda: _dirs()[1],
        description="Installed backends, user models, downloads.",
    )
    max_loaded_models: int = Field(1, ge=-1, description="Per model type; -1 = unlimited.")
    log_format: Literal["console", "json"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    plugins_allow: str | None = Field(None, description="Comma-separated plugins to load.")
    plugins_deny: str = Field("", description="Comma-separated plugins never to load.")
    offline: bool = Field(False, description="Never download; use what is installed.")
    heartbeat_interval: float = Field(1.0, gt=0, description="SSE ping while backend is silent.")
    load_timeout: float = Field(
        600.0,
        gt=0,
        description="Seconds a backend may take to start (raised to the floor a backend "
        "declares as its start_timeout option, e.g. halogen:rocm 3600; "
        "recipes.<recipe>.start_timeout overrides both); also the longest a request "
        "waits for its model to load (then 503 model_loading; the load goes on).",
    )
    stop_grace: float = Field(
        5.0,
        ge=0,
        description="Seconds in-flight requests get to "
        "finish at shutdown, and a backend's SIGTERM-to-SIGKILL grace.",
    )
    max_concurrency: int = Field(
        0, ge=0, description="Requests one model serves at once (0: no limit beyond the backend's)."
    )
    max_queue: int = Field(
        16,
        ge=0,
        description="Requests that may wait for a backend with limited concurrency before 503s.",
    )
    keep_alive: KeepAlive = Field(
        -1,
        description="How long a model stays loaded with no request: seconds or a "
        "duration ('10m', '1h'); 0 unloads it after each answer; -1 (default) keeps it until "
        "it is evicted or unloaded. A request's or load's `keep_alive` overrides it.",
    )
    model_keep_alive: dict[str, KeepAlive] = Field(
        default_factory=dict, description="`keep_alive` per model name, over `keep_alive`."
    )
    rpc_workers: dict[str, list[str]] = Field(
        default_factory=dict,
        description="llama.cpp RPC workers (`host:port`, started with "
        "`lemon worker`) by model name or recipe name (a model's entry wins): a load "
        "places layers on them with `--rpc`.",
    )
    recipes: dict[str, dict[str, object]] = Field(  # checked against the declared options
        default_factory=dict, description="Per-recipe configuration sections."
    )
    eviction: EvictionSettings = Field(
        default_factory=EvictionSettings,
        description="Auto-eviction: `auto_evict`, `auto_evict_threshold_pct`, "
        "`evict_idle_timeout`, `downsize_idle_timeout`, `evict_weight_factor`, `interval`.",
    )
    lock_files: list[Path] = Field(
        default_factory=list, description="Administrator lock files, merged last."
    )
    allow_experimental: str = Field(
        "",
        description="Comma-separated recipe:backend names (or 'all') whose experimental "
        "first install is consented to.",
    )
    allow_unverified: str = Field(
        "",
        description="Comma-separated recipe:backend names that may install without a "
        "pinned SHA-256 (not recommended).",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=default_config_file())
        return init_settings, env_settings, toml

    @staticmethod
    def _names(value: str | None) -> list[str]:
        return [n.strip() for n in (value or "").split(",") if n.strip()]

    @property
    def allowed_plugins(self) -> list[str] | None:
        return None if self.plugins_allow is None else self._names(self.plugins_allow)

    @property
    def denied_plugins(self) -> list[str]:
        return self._names(self.plugins_deny)

    def keep_alive_for(self, model: ModelInfo) -> float:
        """``model``'s idle seconds before unload (``math.inf``: forever), by name or
        alias."""
        for name in (model.name, *model.aliases):
            if name in self.model_keep_alive:
                return self.model_keep_alive[name]
        return self.keep_alive

    def workers_for(self, model: ModelInfo) -> tuple[str, ...]:
        """The RPC workers ``model`` runs with: its entry in ``rpc_workers`` (by name or
        alias), else its recipe's; checked ``host:port`` strings."""
        for name in (model.name, *model.aliases, model.recipe):
            if name in self.rpc_workers:
                return tuple(str(w) for w in parse_workers(self.rpc_workers[name]))
        return ()

    @field_validator("api_key", "admin_api_key")
    @classmethod
    def _key_not_empty(cls, value: SecretStr | None) -> SecretStr | None:
        """A key that is set must be usable: an empty one (``LEMON_API_KEY=""``) would
        otherwise read as no key at all, leaving every route open."""
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("is set but empty: give it a key, or unset it to serve without one")
        return value

    @field_validator("rpc_workers")
    @classmethod
    def _workers_parse(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for workers in value.values():
            parse_workers(workers)  # an AddressError says what is wrong
        return value

    @property
    def unverified_allowed(self) -> list[str]:
        return self._names(self.allow_unverified)
