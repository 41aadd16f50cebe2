"""The conformance kit: one test suite every backend plugin runs against its real engine.

Subclass :class:`BackendConformance` in your plugin's tests and provide the
``conformance_target`` fixture (a running lemoncore server with your plugin, and a model
your backend serves)::

    from lemoncore.conformance import BackendConformance, ConformanceTarget

    class TestMyBackend(BackendConformance):
        @pytest.fixture(scope="class")
        @classmethod
        def conformance_target(cls, tmp_path_factory):
            with running_server(tmp_path_factory.mktemp("lemon")) as server:
                yield ConformanceTarget(server, model="my-model", backend="mine:cpu")

The suite checks what clients and lemoncore rely on: OpenAI shapes for chat and
completions (streaming and not), the served model's name in every answer, usage
arithmetic, ``include_usage``, OpenAI-shaped
errors, readiness (lemoncore reports a model ready only when its engine answers health),
a clean shutdown within the grace period, a declared number option's bounds enforced
(400 naming it), a new engine after the old one crashed, every endpoint the backend
declares (and
Anthropic's and the Responses API, translated for a chat-only engine) answering, a
device and policy consistent with the backend's declared support rows, and owner
dispatch (a backend another plugin adds to your recipe is answered by that plugin, never
by yours, and yours never by it).

``lemon validate`` runs the same checks on a user's machine (:func:`field_checks`), without
pytest; plugins add checks only real hardware can answer through
``register_field_checks`` (:class:`~lemoncore.fieldchecks.FieldCheck`,
re-exported here). See ``docs/validation.md``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import httpx
import psutil

from lemoncore.defaults import backend_device_kinds
from lemoncore.fieldchecks import (
    CheckSkipped,
    FieldCheck,
    FieldContext,
    FieldResult,
)
from lemoncore.hookspecs import hookimpl
from lemoncore.hosts import detect_host
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.plugins import PluginHost, load_plugins
from lemoncore.recipes import (
    Backend,
    BackendContribution,
    DeviceKind,
    ModelInfo,
    OptionScope,
    Recipe,
    SupportRow,
)
from lemoncore.translation import TRANSLATIONS

__all__ = ["SAMPLES", "BackendConformance", "CheckSkipped", "ConformanceTarget",
           "FieldCheck", "FieldContext", "FieldResult", "Served", "field_checks"]


class Served(Protocol):
    """A running lemoncore server (``lemoncore.testing.ServerProcess`` is one)."""

    @property
    def url(self) -> str: ...

    @property
    def api(self) -> str: ...


def _skip(reason: str) -> None:
    """Skip the check: pytest's skip under pytest, :class:`CheckSkipped` elsewhere."""
    pytest = sys.modules.get("pytest")
    if pytest is not None:
        pytest.skip(reason)
    raise CheckSkipped(reason)


@dataclass
class ConformanceTarget:
    """``samples``: a request for each endpoint your backend declares beyond lemoncore's
    own (``register_endpoints``), as ``httpx.post`` keyword arguments without the model
    (``{"json": {...}}``, or ``{"data": {...}, "files": {...}}`` for an upload)."""

    server: Served
    model: str
    backend: str  # recipe:backend
    completions: bool = True  # the engine serves /v1/completions (non-streaming)
    stop_grace: float = 5.0
    samples: dict[str, dict[str, Any]] = field(default_factory=dict)
    plugins: dict[str, object] = field(default_factory=dict)  # in-process, as the server's
    plugins_allow: list[str] | None = None  # installed plugins the server loads (None: all)


_HELLO = [{"role": "user", "content": "Say hello."}]
# A request for each endpoint lemoncore routes itself (the model is added).
SAMPLES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"json": {"messages": _HELLO, "max_tokens": 4}},
    "/v1/completions": {"json": {"prompt": "One, two,", "max_tokens": 4}},
    "/v1/embeddings": {"json": {"input": "hello"}},
    "/v1/messages": {"json": {"messages": _HELLO, "max_tokens": 4}},
    "/v1/messages/count_tokens": {"json": {"messages": _HELLO}},
    "/v1/responses": {"json": {"input": "Say hello.", "max_output_tokens": 4}},
    "/v1/rerank": {"json": {"query": "fruit", "documents": ["apple", "car"]}},
    "/tokenize": {"json": {"content": "hello"}},
    "/detokenize": {"json": {"tokens": [1, 2]}},
}


def _usage_adds_up(usage: dict[str, Any]) -> None:
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def _error_shaped(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]


class _Intruder:
    """A careless plugin: adds a backend to someone else's recipe and answers every call
    of an owner hook without asking whose backend it is."""

    def __init__(self, recipe: str) -> None:
        self.recipe, self.calls = recipe, list[str]()
        self.plan = InstallPlan("intruder", location=Path("."))
        self.spec = LaunchSpec(argv=("intruder",))

    @hookimpl
    def register_backends(self) -> list[BackendContribution]:
        row = SupportRow(os=frozenset({"linux", "windows", "darwin"}),
                         devices={DeviceKind.CPU: frozenset()})
        return [BackendContribution(recipe=self.recipe,
                                    backend=Backend(name="intruder", support=(row,)))]

    @hookimpl
    def install(self, backend: Backend) -> InstallPlan:
        self.calls.append(f"install {backend.name}")
        return self.plan

    @hookimpl
    def launch(self, backend: Backend) -> LaunchSpec:
        self.calls.append(f"launch {backend.name}")
        return self.spec

    @hookimpl
    def normalize_request(self, backend: Backend) -> None:
        self.calls.append(f"normalize_request {backend.name}")


class BackendConformance:
    """Subclass this (its name must start with ``Test``) and provide the target fixture."""

    MESSAGES: ClassVar[list[dict[str, str]]] = [
        {"role": "user", "content": "Count from one to five."}]

    def _chat(self, target: ConformanceTarget, **extra: Any) -> httpx.Response:
        return httpx.post(target.server.api + "/chat/completions", timeout=120, json={
            "model": target.model, "messages": self.MESSAGES, "max_tokens": 8, **extra})

    def _stream(self, target: ConformanceTarget, **extra: Any) -> list[str]:
        with httpx.stream("POST", target.server.api + "/chat/completions", timeout=120, json={
                "model": target.model, "messages": self.MESSAGES, "max_tokens": 8,
                "stream": True, **extra}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            return [line[6:] for line in response.iter_lines() if line.startswith("data: ")]

    def test_chat_completion_shape_and_usage(self, conformance_target: ConformanceTarget
                                             ) -> None:
        body = self._chat(conformance_target).json()
        assert body["object"] == "chat.completion"
        choice = body["choices"][0]
        assert choice["message"]["role"] == "assistant"
        assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
        assert choice["finish_reason"] in {"stop", "length"}
        _usage_adds_up(body["usage"])

    def test_streaming_chunks_end_with_done(self, conformance_target: ConformanceTarget
                                            ) -> None:
        data = self._stream(conformance_target)
        assert data[-1] == "[DONE]"
        chunks = [json.loads(d) for d in data[:-1]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                       if c["choices"])
        assert text
        assert not any("total_tokens" in (c.get("usage") or {}) for c in chunks)
        assert any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks)

    def test_include_usage_adds_a_usage_chunk(self, conformance_target: ConformanceTarget
                                              ) -> None:
        data = self._stream(conformance_target, stream_options={"include_usage": True})
        last = json.loads(data[-2])
        assert last["choices"] == []
        _usage_adds_up(last["usage"])

    def test_answers_name_the_served_model(self, conformance_target: ConformanceTarget
                                           ) -> None:
        """lemoncore passes the engine's answers through: their ``model`` must be the
        name the client asked for, which the launch must give the engine (llama-server:
        ``--alias <model.name>``)."""
        name = conformance_target.model
        fix = ("the engine reports model {!r}, not the served name {!r}: make the launch "
               "give the engine the model's name (llama-server: --alias model.name)")
        answered = self._chat(conformance_target).json()["model"]
        assert answered == name, fix.format(answered, name)
        data = self._stream(conformance_target, stream_options={"include_usage": True})
        streamed = {json.loads(d).get("model") for d in data[:-1]}
        assert streamed == {name}, fix.format(sorted(map(str, streamed - {name})), name)

    def test_completions_shape(self, conformance_target: ConformanceTarget) -> None:
        if not conformance_target.completions:
            _skip("the backend declares no /v1/completions")
        body = httpx.post(conformance_target.server.api + "/completions", timeout=120, json={
            "model": conformance_target.model, "prompt": "One, two,",
            "max_tokens": 8}).json()
        assert body["object"] == "text_completion"
        assert isinstance(body["choices"][0]["text"], str)
        _usage_adds_up(body["usage"])

    def test_errors_are_openai_shaped(self, conformance_target: ConformanceTarget) -> None:
        api = conformance_target.server.api
        _error_shaped(httpx.post(api + "/chat/completions", json={
            "model": "no-such-model", "messages": self.MESSAGES}), 404)
        _error_shaped(httpx.post(api + "/chat/completions", json={
            "model": conformance_target.model}), 400)

    def test_ready_means_the_engine_answers(self, conformance_target: ConformanceTarget
                                            ) -> None:
        url = conformance_target.server.url
        httpx.post(url + "/api/v1/load", json={"model_name": conformance_target.model},
                   timeout=120).raise_for_status()
        loaded = {m["model_name"]: m for m in
                  httpx.get(url + "/api/v1/health").json()["all_models_loaded"]}
        server = loaded[conformance_target.model]
        assert server["status"] in {"ready", "busy"}
        assert f"{server['recipe']}:{server['backend']}" == conformance_target.backend
        assert self._chat(conformance_target).status_code == 200  # no warm-up needed

    def test_declared_device_matches_the_support_rows(
        self, conformance_target: ConformanceTarget
    ) -> None:
        url = conformance_target.server.url
        recipe_name, backend_name = conformance_target.backend.split(":")
        info = httpx.get(url + "/api/v1/system-info").json()["recipes"][recipe_name]
        declared = info["backends"][backend_name]
        rows = tuple(SupportRow(os=frozenset(r["os"]), devices={
            DeviceKind(k): frozenset(v) for k, v in r["devices"].items()})
            for r in declared["support"])
        kinds = backend_device_kinds(Backend(name=backend_name, support=rows), detect_host())
        httpx.post(url + "/api/v1/load", json={"model_name": conformance_target.model},
                   timeout=120).raise_for_status()
        server = next(m for m in httpx.get(url + "/api/v1/health").json()["all_models_loaded"]
                      if m["model_name"] == conformance_target.model)
        assert server["device"] in {k.device.value for k in kinds}
        assert server["is_amd_gpu"] == (kinds == {DeviceKind.AMD_GPU})

    def test_owner_hooks_reach_only_the_backend_owner(
        self, conformance_target: ConformanceTarget
    ) -> None:
        recipe_name, backend_name = conformance_target.backend.split(":")
        installed = load_plugins(None, ())
        owner = installed.registry.backend_owners[recipe_name, backend_name]
        intruder = _Intruder(recipe_name)
        plugins = PluginHost()
        plugins.add(owner, installed.pm.get_plugin(owner))
        plugins.add("intruder", intruder)
        recipe: Recipe = plugins.finish().recipes[recipe_name]
        theirs, ours = recipe.backend("intruder"), recipe.backend(backend_name)
        assert theirs is not None and ours is not None
        host = detect_host()
        assert plugins.install_plan(recipe, theirs, host, {}, None) is intruder.plan
        context = LaunchContext(Path("m.gguf"), {}, Path("."), "127.0.0.1", 1, 1)
        model = ModelInfo(name="m", recipe=recipe_name, checkpoint="file:/m.gguf")
        assert plugins.launch_spec(recipe, theirs, model, context, host) is intruder.spec
        assert plugins.install_plan(recipe, ours, host, {}, None) is not intruder.plan
        plugins.normalize_request(recipe, ours, "/v1/chat/completions", {"messages": []})
        assert intruder.calls == ["install intruder", "launch intruder"]

    def test_every_endpoint_the_backend_serves_answers(
        self, conformance_target: ConformanceTarget
    ) -> None:
        """Each endpoint the backend declares (``Backend.endpoints``) and those lemoncore
        translates for it answers 200 with a request for the target's model type."""
        target, url = conformance_target, conformance_target.server.url
        recipe_name, backend_name = target.backend.split(":")
        registry = load_plugins(target.plugins_allow, (), target.plugins).registry
        backend = registry.recipes[recipe_name].backend(backend_name)
        assert backend is not None
        httpx.post(url + "/api/v1/load", json={"model_name": target.model},
                   timeout=120).raise_for_status()
        kind = next(m["type"] for m in httpx.get(url + "/api/v1/health").json()[
            "all_models_loaded"] if m["model_name"] == target.model)
        served = set(backend.endpoints) | {
            path for path, t in TRANSLATIONS.items() if t.target in backend.endpoints}
        failed = []
        for path in sorted(served):
            endpoint = registry.endpoints.get(path)
            if endpoint is None or endpoint.model_type.value != kind:
                continue
            sample = target.samples.get(path) or SAMPLES.get(path)
            if sample is None:
                failed.append(f"{path}: no sample request (ConformanceTarget.samples)")
                continue
            request: dict[str, Any] = dict(sample)
            named = "data" if endpoint.body == "multipart" else "json"
            request[named] = {**request.get(named, {}), endpoint.model_field: target.model}
            answer = httpx.post(url + path, timeout=120, **request)
            if answer.status_code != 200:
                failed.append(f"{path}: {answer.status_code} {answer.text[:200]}")
        assert not failed, "\n".join(failed)

    def test_unload_stops_the_engine_within_the_grace_period(
        self, conformance_target: ConformanceTarget
    ) -> None:
        url = conformance_target.server.url
        httpx.post(url + "/api/v1/load", json={"model_name": conformance_target.model},
                   timeout=120).raise_for_status()
        pid = next(m["pid"] for m in httpx.get(url + "/api/v1/health").json()[
            "all_models_loaded"] if m["model_name"] == conformance_target.model)
        started = time.monotonic()
        httpx.post(url + "/api/v1/unload", json={"model_name": conformance_target.model},
                   timeout=60).raise_for_status()
        assert time.monotonic() - started <= conformance_target.stop_grace + 1
        assert not (pid and psutil.pid_exists(pid)), \
            f"the engine (pid {pid}) still runs after the unload"


    def test_a_declared_option_out_of_bounds_is_refused(
        self, conformance_target: ConformanceTarget
    ) -> None:
        """A load with a bounded number option the backend declares set past its maximum
        answers 400 naming the option, before anything starts: what users may set is what
        the plugin declares, typed and bounded."""
        target, url = conformance_target, conformance_target.server.url
        recipe_name, backend_name = target.backend.split(":")
        recipe = load_plugins(target.plugins_allow, (), target.plugins).registry.recipes[
            recipe_name]
        backend = recipe.backend(backend_name)
        assert backend is not None
        option = next((o for o in (*recipe.options, *backend.options)
                       if o.scope is OptionScope.REQUEST and o.type in {"int", "float"}
                       and o.maximum is not None), None)
        if option is None:
            _skip(f"{target.backend} declares no bounded number option")
            return
        too_big = option.maximum + 1 if option.maximum is not None else 0
        answer = httpx.post(url + "/api/v1/load", timeout=120, json={
            "model_name": target.model, "backend": backend_name,
            option.name: int(too_big) if option.type == "int" else too_big})
        _error_shaped(answer, 400)
        assert option.name in answer.json()["error"]["message"], (
            f"the refusal should name the option {option.name!r}: {answer.text}")

    def test_a_crashed_engine_is_loaded_again(self, conformance_target: ConformanceTarget
                                              ) -> None:
        """Kill the engine: the model is unloaded, and the next request starts a new
        engine and answers (an engine that cannot start twice, on a port or a file it
        left behind, fails here)."""
        target, url = conformance_target, conformance_target.server.url
        httpx.post(url + "/api/v1/load", json={"model_name": target.model},
                   timeout=120).raise_for_status()

        def engine() -> int | None:
            return next((m["pid"] for m in httpx.get(url + "/api/v1/health").json()[
                "all_models_loaded"] if m["model_name"] == target.model), None)

        pid = engine()
        if not pid:
            _skip("the engine runs in no process of its own that lemoncore reports")
            return
        psutil.Process(pid).kill()
        deadline = time.monotonic() + 15
        while engine() == pid:
            assert time.monotonic() < deadline, "the crashed engine is still listed loaded"
            time.sleep(0.1)
        answer = self._chat(target)
        assert answer.status_code == 200, (
            f"after a crash the next request should load the model again: {answer.text}")
        assert engine() not in (None, pid)


# Checks of the plugin's code rather than of this machine: the plugin's CI runs them.
NOT_IN_THE_FIELD = {"test_owner_hooks_reach_only_the_backend_owner":
                    "owner dispatch is a property of the plugin's code, checked by its CI"}


def field_checks() -> list[tuple[str, str, Callable[[BackendConformance, ConformanceTarget],
                                                     None]]]:
    """The kit's checks ``lemon validate`` runs: (name, description, unbound method), in
    the class's order; the description is the method's name in words."""
    return [(name.removeprefix("test_"), name.removeprefix("test_").replace("_", " "), method)
            for name, method in vars(BackendConformance).items()
            if name.startswith("test_") and name not in NOT_IN_THE_FIELD]
