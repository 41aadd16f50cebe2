"""The run-time controls a plugin's route may use (Lemonade's ``/internal/set``,
``/internal/config``, ``/internal/pin``, ``/internal/simulate-vram-pressure``,
``/internal/aliases``):
:meth:`RuntimeControl.of` hands them only to a request with the rights of the management
routes, which the key guard marks on its scope (:data:`ADMIN_SCOPE`, set by
:class:`lemoncore.api.guard.Guard` from ``may_manage``), whatever path the plugin serves
them at. Everything goes through the router's own methods."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.requests import Request

from lemoncore.errors import LemonError
from lemoncore.serving.router import Router
from lemoncore.serving.runtime import RuntimeChange, RuntimeConfig, RuntimePlan

ADMIN_SCOPE = "lemoncore.admin"  # == lemoncore.api.guard.ADMIN_SCOPE (tests check)


class RuntimeControl:
    """Change what may change while the server runs; see :mod:`~lemoncore.serving.runtime`."""

    def __init__(self, router: Router) -> None:
        self._router = router

    @staticmethod
    def of(request: Request) -> RuntimeControl:
        """The controls of the app serving ``request``; a 403 ``admin_required`` unless
        the request may use the management routes."""
        if request.scope.get(ADMIN_SCOPE) is not True:
            raise LemonError(
                "run-time configuration needs the rights of the management routes: the "
                "admin key, or a request from this machine while no admin key is set",
                403,
                code="admin_required",
            )
        router: Router = request.app.state.core.router
        return RuntimeControl(router)

    def config(self) -> RuntimeConfig:
        return self._router.runtime()

    async def set(self, values: dict[str, Any]) -> RuntimePlan:
        """Apply ``values`` (:class:`RuntimeChange`'s fields); a bad one is a 400
        ``invalid_config`` naming it (:class:`~lemoncore.serving.runtime.BackendUnusable`,
        ``backend_unusable``, for a llama.cpp backend that cannot load here), and
        nothing changes."""
        try:
            change = RuntimeChange.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise LemonError(f"{where}: {first['msg']}", 400, code="invalid_config") from None
        return await self._router.configure(change)

    def pin(self, model: str, pinned: bool) -> str:
        """Pin or unpin a loaded model; its canonical name (404 when not loaded)."""
        return self._router.set_pin(model, pinned).model.name

    def aliases(self) -> dict[str, str]:
        """The run-time aliases, alias -> target (:mod:`lemoncore.models.aliases`)."""
        return self._router.models.aliases.all()

    def set_alias(self, alias: str, target: str) -> None:
        """Point ``alias`` at ``target`` (a model, or another alias), as Lemonade's
        ``handle_aliases_add`` checks it: a 400 ``invalid_alias`` for a reserved prefix
        or itself, a 409 ``alias_conflict`` for a model's own name or a chain that
        cycles or runs too long."""
        alias, target = alias.removesuffix(":latest"), target.removesuffix(":latest")
        if alias == target:
            raise LemonError(
                "Alias cannot point to itself", 400, code="invalid_alias", param="alias"
            )
        if alias.partition(".")[0] in {"user", "extra", "builtin"}:
            raise LemonError(
                "Alias name cannot use reserved prefixes (user., extra., builtin.)",
                400,
                code="invalid_alias",
                param="alias",
            )
        models = self._router.models
        if alias not in models.aliases.all() and models.get(alias) is not None:
            raise LemonError(
                f"Cannot create alias '{alias}': Name conflicts with an existing canonical model",
                409,
                code="alias_conflict",
                param="alias",
            )
        models.aliases.set(alias, target)

    def remove_alias(self, alias: str) -> bool:
        """Forget ``alias``; whether it was one."""
        return self._router.models.aliases.remove(alias.removesuffix(":latest"))

    async def evaluate_eviction(self, used: float | None) -> list[str]:
        """One auto-eviction pass with ``used`` memory (a fraction; below 0: idle only);
        the models it evicted."""
        return [e.name for e in (await self._router.evaluate_eviction(used)).evict]
