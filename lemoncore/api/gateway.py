"""The core as the routes a plugin adds (``register_routes``) use it.

A plugin that serves another API surface (Ollama's, say) translates its requests into
calls on :class:`Gateway` and never touches lemoncore's internals: models are listed,
loaded, pulled and deleted as ``/api/v1/*`` does, and inference goes through the same
path as ``/v1/*`` (loading, queueing, retries, wedge detection, token metrics). Errors
are :class:`lemoncore.errors.LemonError`; a plugin answers them in its API's own shape.

Get it in a handler with ``Gateway.of(request)``: that gateway acts with the request's
rights. One that may not use the management routes (it has the API key, not the admin
key) cannot pin, unpin, reload with other options or unload a pinned model: a 403
``model_pinned``, as ``/api/v1`` would refuse it; pulls and deletes need those rights too.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.requests import Request

from lemoncore.api import bodies, replies, telemetry
from lemoncore.api.disconnect import until_disconnect
from lemoncore.api.guard import may_manage
from lemoncore.api.inference import check_request
from lemoncore.api.loaded import loaded_models
from lemoncore.api.upstream import backend_error
from lemoncore.core import Core
from lemoncore.errors import LemonError
from lemoncore.launch import ProgressCallback
from lemoncore.models.variants import repo_files
from lemoncore.recipes import Endpoint, ModelInfo
from lemoncore.serving.forwarding import exchange
from lemoncore.serving.proxy import BackendFailure, broken
from lemoncore.serving.sse import DONE, DataLines, error_message


@dataclass(frozen=True)
class CollectionMembers:
    """A collection as a plugin sees it: its public id, its recipe and its registered
    components, in order."""

    id: str
    recipe: str
    models: list[ModelInfo]
    complete: bool  # every component is registered now (one may have been deleted)


class Gateway:
    """Public calls on a running lemoncore; stable within a minor version."""

    def __init__(self, core: Core, manage: bool = True, surface: str | None = None) -> None:
        """``manage``: whether the caller may do what the management routes do;
        ``surface``: the path its client called (told to the backend owner's
        ``normalize_request``)."""
        self._core, self._manage, self._surface = core, manage, surface

    until_disconnect = staticmethod(until_disconnect)
    """Await work for a request, cancelled (``None``) if its client disconnects first."""

    @staticmethod
    def of(request: Request) -> Gateway:
        """The gateway of the app serving ``request``, with that request's rights: the
        one way a route reaches the core."""
        core: Core = request.app.state.core
        settings = core.settings
        key = settings.admin_api_key or settings.api_key
        return Gateway(
            core,
            may_manage(
                request.scope, key.get_secret_value() if key else None, settings.allow_remote_admin
            ),
            request.url.path,
        )

    def _require_manage(self, what: str) -> None:
        if not self._manage:
            raise LemonError(
                f"{what} needs the rights of the management routes: the admin "
                "key, or a request from this machine while no admin key is "
                "set",
                403,
                code="admin_required",
            )

    # Models ------------------------------------------------------------------------

    def models(self) -> list[ModelInfo]:
        """Every model whose recipe is installed, downloaded or not."""
        recipes = self._core.plugins.registry.recipes
        return [m for m in self._core.models.all().values() if m.recipe in recipes]

    def model(self, name: str) -> ModelInfo:
        """The model called ``name`` (or an alias of it); a 404 ``model_not_found``, a
        400 ``recipe_not_installed``, or a 400 ``invalid_model_name`` for a name no model
        can have (too long, a control character: :func:`bodies.checked_name`), as the
        core's own routes refuse it."""
        bodies.checked_name(name)
        return self._core.router.model(name)

    def collection(self, name: str) -> CollectionMembers | None:
        """The collection ``name`` names (:mod:`lemoncore.models.collections`), or ``None``."""
        found = self._core.models.collection(name)
        if found is None:
            return None
        members = [m for c in found.components if (m := self._core.models.get(c))]
        complete = len(members) == len(found.components)
        return CollectionMembers(found.id, found.recipe, members, complete)

    def collections(self) -> list[CollectionMembers]:
        """Every collection, as :meth:`collection` gives one."""
        found = (self.collection(c.id) for c in self._core.models.collections())
        return [c for c in found if c is not None]

    async def local_path(self, model: ModelInfo) -> Path | None:
        """The model's main file when it is downloaded, else ``None``."""
        return await anyio.to_thread.run_sync(self._core.models.local_path, model)

    def loaded(self) -> list[replies.LoadedModel]:
        """The loaded models, as ``/api/v1/health`` lists them."""
        return loaded_models(self._core)

    async def load_options(self, name: str) -> dict[str, Any]:
        """The recipe options a load of ``name`` by a request would use now (model
        defaults < saved < configured, as :meth:`ensure_loaded` plans them); its catalogue
        ``recipe_options`` when no load can be planned (a backend not installed, a bad
        saved option: the load itself says why)."""
        try:
            return dict((await self._core.router.plan(name, explicit=False)).options)
        except LemonError:
            return dict(self.model(name).recipe_options)

    async def load(
        self,
        name: str,
        options: Mapping[str, Any] | None = None,
        pinned: bool | None = None,
        keep_alive: float | None = None,
    ) -> replies.LoadedModel:
        """Load ``name`` as ``POST /api/v1/load`` does: ``options`` are request-scope
        recipe options (checked; new ones reload a loaded model); ``keep_alive``
        (seconds, ``math.inf`` forever) replaces the model's idle time before unload."""
        if pinned is not None:
            self._require_manage("pinning or unpinning a model")
        server = await self._core.router.load(
            name, options, pinned, keep_alive=keep_alive, manage=self._manage
        )
        return replies.LoadedModel.of(server)

    async def ensure_loaded(
        self, name: str, keep_alive: float | None = None
    ) -> replies.LoadedModel:
        """Load ``name`` as an inference request does: with its saved options, unless it
        is loaded already (however it was loaded); a crash-looping backend's cool-down
        applies. ``keep_alive`` as for :meth:`load`."""
        server = await self._core.router.load(name, explicit=False, keep_alive=keep_alive)
        return replies.LoadedModel.of(server)

    async def unload(self, name: str) -> None:
        """Unload ``name`` (a 404 ``model_not_loaded`` if it is not loaded)."""
        await self._core.router.unload(name, manage=self._manage)

    async def pull(self, name: str, progress: ProgressCallback | None = None) -> Path:
        """Download a registered or catalogue model (verified, resumable); ``progress``
        gets ``(bytes_done, bytes_total)`` of all its files."""
        self._require_manage("a pull")
        model = self._core.models.get(name)
        if model is None:
            raise LemonError(
                f"model {name!r} is not registered or in the catalogue", 404, code="model_not_found"
            )
        return await self._core.models.pull(model, progress)

    async def repo_files(self, repo: str) -> list[str]:
        """The files of Hugging Face repository ``repo`` (``gguf_variants`` groups them):
        the hub's list, the local cache's when offline or the hub cannot answer; a 404
        when the hub has no such repository, a 502 when neither can list it."""
        return await anyio.to_thread.run_sync(repo_files, repo, self._core.models.offline)

    async def delete(self, name: str) -> None:
        """Unload and remove a downloaded model (a user model is forgotten too)."""
        self._require_manage("a delete")
        model = self._core.models.get(name)
        if model is None:
            raise LemonError(f"model {name!r} not found", 404, code="model_not_found")
        if not self._core.models.deletable(model):  # raises its 422 before anything unloads
            self._core.models.delete(model)
        if self._core.router.loaded(name) is not None:
            await self._core.router.unload(name)
        self._core.models.delete(model)

    # Inference -----------------------------------------------------------------------

    def _endpoint(
        self, path: str, body: dict[str, Any]
    ) -> tuple[ModelInfo, Endpoint, float | None]:
        """The model, endpoint and ``keep_alive`` of a request; ``body`` gets the model's
        canonical name (and ``max_tokens`` for ``max_completion_tokens``), as ``/v1``
        requests do."""
        endpoint = self._core.plugins.registry.endpoints.get(path)
        if endpoint is None:
            raise LemonError(f"no routed endpoint {path}", 404)
        model, checked = check_request(self._core, endpoint, bodies.body_of(endpoint), body)
        return model, endpoint, checked.keep_alive

    async def complete(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Send ``body`` (an OpenAI-shaped request naming its ``model``) to a routed
        endpoint (``/v1/chat/completions``) and return the engine's JSON answer; the
        engine's error answer is raised (a 5xx as 502). The body's ``keep_alive`` (seconds
        or a duration) works as on ``/v1`` and is not sent to the engine."""
        body = {**body, "stream": False}
        model, endpoint, keep_alive = self._endpoint(path, body)
        started = time.monotonic()
        answer = await exchange(
            self._core.router,
            model,
            path,
            body,
            stream=False,
            retry=endpoint.retried,
            keep_alive=keep_alive,
            surface=self._surface,
        )
        telemetry.watch(self._core.router, answer, started, stream=False)
        async with answer:
            if answer.upstream.status_code != 200:
                raise backend_error(answer.upstream)
            reply: dict[str, Any] = json.loads(answer.upstream.content)
            return reply

    async def stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Stream ``body`` to a routed endpoint: each chunk's JSON, until the engine's
        ``[DONE]``. An engine error, before or during the stream, is raised. Closing the
        iterator (or cancelling its consumer) closes the engine's connection, which stops
        its generation."""
        body = {**body, "stream": True}
        model, endpoint, keep_alive = self._endpoint(path, body)
        started = time.monotonic()
        answer = await exchange(
            self._core.router,
            model,
            path,
            body,
            stream=True,
            retry=endpoint.retried,
            keep_alive=keep_alive,
            surface=self._surface,
        )
        telemetry.watch(self._core.router, answer, started, stream=True)
        async with answer:
            if answer.upstream.status_code != 200:
                raise backend_error(answer.upstream)
            lines = DataLines(self._core.settings.max_answer_bytes)
            try:
                async for chunk in answer.upstream.aiter_raw():
                    for event in lines.feed(chunk):
                        if event is DONE:
                            answer.end(failed=False)
                            return
                        if (message := error_message(event)) is not None:
                            answer.end(failed=True)
                            raise LemonError(
                                f"backend error: {message}", 502, "backend_error", "backend_error"
                            )
                        answer.usage = event.get("usage") or answer.usage
                        yield event
                answer.end(failed=False)  # an engine that omits [DONE]
            except httpx.TransportError as exc:
                answer.end(failed=True)
                raise BackendFailure(
                    broken("backend stream broke", exc, await answer.death())
                ) from exc
