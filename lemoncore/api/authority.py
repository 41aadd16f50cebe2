"""What a request may do: use the management routes, or only the API.

The rule is :class:`~lemoncore.api.guard.Guard`'s for management routes, asked of any
request, so that a plugin's route (served with the API key) does through the
:class:`~lemoncore.api.gateway.Gateway` only what its caller may do through ``/api/v1``.
"""

from __future__ import annotations

from starlette.types import Scope

from lemoncore.api.guard import is_local, presented_key, same


def may_manage(scope: Scope, admin_key: str | None, allow_remote_admin: bool) -> bool:
    """Whether the request in ``scope`` may load, unload, pin and unpin models as the
    management routes do: it presents ``admin_key`` (``admin_api_key``, else
    ``api_key``) or, while no key is set, comes from this machine (:func:`is_local`) or
    ``allow_remote_admin`` is on."""
    headers = dict(scope.get("headers") or [])
    if admin_key:
        return same(presented_key(headers), admin_key)
    return allow_remote_admin or is_local(scope, headers)
