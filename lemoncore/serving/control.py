"""The run-time controls a plugin's route may use (Lemonade's ``/internal/set``,
``/internal/config``, ``/internal/pin``, ``/internal/simulate-vram-pressure``):
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

    async def evaluate_eviction(self, used: float | None) -> list[str]:
        """One auto-eviction pass with ``used`` memory (a fraction; below 0: idle only);
        the models it evicted."""
        return [e.name for e in (await self._router.evaluate_eviction(used)).evict]
