"""The conformance kit's checks every backend must pass: :class:`BackendConformance`,
the test class plugin authors subclass (through :mod:`lemoncore.conformance`), driven by
what the backend declares (its endpoints, their sample requests, its support rows and
options), and :func:`field_checks`, the checks as ``lemon validate`` runs them, without
pytest. A backend that serves chat subclasses :class:`~.chatsuite.ChatConformance`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import ClassVar, NamedTuple

import httpx
import psutil
from pydantic import JsonValue, TypeAdapter

from lemoncore.defaults import backend_device_kinds
from lemoncore.fieldchecks import CheckSkipped
from lemoncore.hosts import detect_host
from lemoncore.launch import LaunchContext
from lemoncore.plugins import PluginHost, load_plugins
from lemoncore.recipes import Backend, DeviceKind, Endpoint, ModelInfo, OptionScope, SupportRow
from lemoncore.validation.answers import expect, json_body, load, loaded, post, quoted
from lemoncore.validation.declared import CHAT, declared, request, serves_chat
from lemoncore.validation.intruder import Intruder
from lemoncore.validation.target import SAMPLES, ConformanceTarget


def skip(reason: str) -> None:
    """Skip the check: pytest's skip under pytest, :class:`CheckSkipped` elsewhere."""
    pytest = sys.modules.get("pytest")
    if pytest is not None:
        pytest.skip(reason)
    raise CheckSkipped(reason)


def error_shaped(response: httpx.Response, status: int, endpoint: Endpoint) -> None:
    """``response`` is ``status`` with an error in ``endpoint``'s shape (``errors``:
    OpenAI's ``{"error": {message, type}}``, Anthropic's ``{"type": "error", ...}``)."""
    expect(response, status, why=f"an error in {endpoint.errors}'s shape")
    body = json_body(response)
    error = body.get("error")
    shape = quoted(response)
    assert isinstance(error, dict), f"no error object; {shape}"
    assert isinstance(error.get("message"), str) and error["message"], f"no message; {shape}"
    assert isinstance(error.get("type"), str) and error["type"], f"no error type; {shape}"
    if endpoint.errors == "anthropic":
        assert body.get("type") == "error", f"not Anthropic-shaped; {shape}"


def served_name(answer: httpx.Response, target: ConformanceTarget) -> None:
    """A JSON answer that names a model names the served one: lemoncore passes the
    engine's answers through, so the launch must give the engine the model's name."""
    if not answer.headers.get("content-type", "").startswith("application/json"):
        return
    body = answer.json()
    named = body.get("model") if isinstance(body, dict) else None
    assert named in (None, target.model), (
        f"{answer.request.url.path}: the engine reports model {named!r}, not the served "
        f"name {target.model!r}: make the launch give the engine the model's name "
        "(llama-server: --alias model.name)"
    )


class BackendConformance:
    """Subclass this (its name must start with ``Test``) and provide the target fixture;
    a backend that serves ``/v1/chat/completions`` subclasses ``ChatConformance``."""

    CHAT_KIT: ClassVar[bool] = False  # ChatConformance: the chat checks are here

    def test_chat_backends_run_the_chat_kit(self, conformance_target: ConformanceTarget) -> None:
        """A backend that serves chat must be tested with ``ChatConformance``, so that it
        cannot lose the chat checks by staying on this class."""
        backend = declared(conformance_target).backend
        assert self.CHAT_KIT or not serves_chat(backend.endpoints), (
            f"{conformance_target.backend} serves /v1/chat/completions: subclass "
            "lemoncore.conformance.ChatConformance (BackendConformance's checks and the "
            "chat checks), not BackendConformance"
        )

    def test_errors_are_shaped_like_the_endpoint(
        self, conformance_target: ConformanceTarget
    ) -> None:
        """On a declared endpoint: an unknown model is a 404 and a request without the
        endpoint's required field a 400, each in the endpoint's error shape."""
        target = conformance_target
        endpoint = declared(target).primary(target)
        unknown = request(target, endpoint, model="no-such-model")
        answer = httpx.post(target.server.url + endpoint.path, timeout=60, **unknown)
        error_shaped(answer, 404, endpoint)
        if endpoint.required:
            missing = request(target, endpoint, drop=endpoint.required)
            answer = httpx.post(target.server.url + endpoint.path, timeout=60, **missing)
            error_shaped(answer, 400, endpoint)

    def test_ready_means_the_engine_answers(self, conformance_target: ConformanceTarget) -> None:
        """Loaded, health says ready (or busy, or downsized) on the right backend, and the first
        request through a declared endpoint answers 200 with no warm-up."""
        target = conformance_target
        endpoint = declared(target).primary(target)
        load(target)
        server = loaded(target)
        assert server is not None, f"{target.model} is not in /api/v1/health after its load"
        assert server["status"] in {"ready", "busy", "downsized"}, (
            f"health says {server['status']!r}"
        )
        assert f"{server['recipe']}:{server['backend']}" == target.backend
        post(
            target,
            endpoint.path,
            why="the first request after the load",
            **request(target, endpoint),
        )

    def test_declared_device_matches_the_support_rows(
        self, conformance_target: ConformanceTarget
    ) -> None:
        target = conformance_target
        recipe_name, backend_name = target.backend.split(":")
        info = json_body(httpx.get(target.server.url + "/api/v1/system-info", timeout=30))
        declared_rows = info["recipes"][recipe_name]["backends"][backend_name]
        rows = tuple(
            SupportRow(
                os=frozenset(r["os"]),
                devices={DeviceKind(k): frozenset(v) for k, v in r["devices"].items()},
            )
            for r in declared_rows["support"]
        )
        kinds = backend_device_kinds(Backend(name=backend_name, support=rows), detect_host())
        load(target)
        server = loaded(target)
        assert server is not None, f"{target.model} is not in /api/v1/health after its load"
        assert server["device"] in {k.device.value for k in kinds}
        assert server["is_amd_gpu"] == (kinds == {DeviceKind.AMD_GPU})

    def test_owner_hooks_reach_only_the_backend_owner(
        self, conformance_target: ConformanceTarget
    ) -> None:
        recipe_name, backend_name = conformance_target.backend.split(":")
        installed = load_plugins(conformance_target.plugins_allow, (), conformance_target.plugins)
        owner = installed.registry.backend_owners[recipe_name, backend_name]
        intruder = Intruder(recipe_name)
        plugins = PluginHost()
        plugins.add(owner, installed.pm.get_plugin(owner))
        plugins.add("intruder", intruder)
        recipe = plugins.finish().recipes[recipe_name]
        theirs, ours = recipe.backend("intruder"), recipe.backend(backend_name)
        assert theirs is not None and ours is not None
        host = detect_host()
        assert plugins.install_plan(recipe, theirs, host, {}, None) is intruder.plan
        context = LaunchContext(Path("m.gguf"), {}, Path("."), "127.0.0.1", 1, 1)
        model = ModelInfo(name="m", recipe=recipe_name, checkpoint="file:/m.gguf")
        assert plugins.launch_spec(recipe, theirs, model, context, host) is intruder.spec
        assert plugins.install_plan(recipe, ours, host, {}, None) is not intruder.plan
        path = CHAT if serves_chat(ours.endpoints) else min(ours.endpoints, default=CHAT)
        given = conformance_target.samples.get(path) or SAMPLES.get(path) or {}
        body = TypeAdapter(dict[str, JsonValue]).validate_python(
            {**given.get("json", {}), "model": conformance_target.model}
        )
        plugins.normalize_request(recipe, ours, path, body, path)
        assert intruder.calls == ["install intruder", "launch intruder"]

    def test_every_endpoint_the_backend_serves_answers(
        self, conformance_target: ConformanceTarget
    ) -> None:
        """Each endpoint the backend declares (``Backend.endpoints``) and those lemoncore
        translates for it answers its sample request with 200 for the target's model
        type; a JSON answer naming a model names the served one."""
        target = conformance_target
        found = declared(target)
        assert found.endpoints, (
            f"{target.backend} declares no endpoint for a {found.model_type} model "
            f"(declared: {', '.join(sorted(found.backend.endpoints)) or 'none'})"
        )
        load(target)
        failed = []
        for path, endpoint in found.endpoints.items():
            try:
                served_name(post(target, path, **request(target, endpoint)), target)
            except AssertionError as exc:
                failed.append(str(exc))
        assert not failed, "\n".join(failed)

    def test_unload_stops_the_engine_within_the_grace_period(
        self, conformance_target: ConformanceTarget
    ) -> None:
        target = conformance_target
        load(target)
        server = loaded(target)
        pid = server["pid"] if server else None
        started = time.monotonic()
        post(target, "/api/v1/unload", json={"model_name": target.model}, timeout=60)
        assert time.monotonic() - started <= target.stop_grace + 1
        assert not (pid and psutil.pid_exists(pid)), (
            f"the engine (pid {pid}) still runs after the unload"
        )

    def test_a_declared_option_out_of_bounds_is_refused(
        self, conformance_target: ConformanceTarget
    ) -> None:
        """A load with a bounded number option the backend declares set past its maximum
        answers 400 naming the option, before anything starts: what users may set is what
        the plugin declares, typed and bounded."""
        target = conformance_target
        found = declared(target)
        option = next(
            (
                o
                for o in (*found.recipe.options, *found.backend.options)
                if o.scope is OptionScope.REQUEST
                and o.type in {"int", "float"}
                and o.maximum is not None
            ),
            None,
        )
        if option is None or option.maximum is None:
            skip(f"{target.backend} declares no bounded number option")
            return
        too_big = option.maximum + 1
        answer = httpx.post(
            target.server.url + "/api/v1/load",
            timeout=120,
            json={
                "model_name": target.model,
                "backend": found.backend.name,
                option.name: int(too_big) if option.type == "int" else too_big,
            },
        )
        expect(answer, 400, target, f"a load with {option.name}={too_big}")
        assert option.name in answer.json()["error"]["message"], (
            f"the refusal should name the option {option.name!r}: {quoted(answer)}"
        )

    def test_a_crashed_engine_is_loaded_again(self, conformance_target: ConformanceTarget) -> None:
        """Kill the engine: the model is unloaded, and the next request through a
        declared endpoint starts a new engine and answers (an engine that cannot start
        twice, on a port or a file it left behind, fails here)."""
        target = conformance_target
        endpoint = declared(target).primary(target)
        load(target)

        def engine() -> int | None:
            server = loaded(target)
            return server["pid"] if server else None

        pid = engine()
        if not pid:
            skip("the engine runs in no process of its own that lemoncore reports")
            return
        psutil.Process(pid).kill()
        deadline = time.monotonic() + 15
        while engine() == pid:
            assert time.monotonic() < deadline, "the crashed engine is still listed loaded"
            time.sleep(0.1)
        why = "after a crash the next request should load the model again"
        post(target, endpoint.path, why=why, **request(target, endpoint))
        assert engine() not in (None, pid)


class KitCheck(NamedTuple):
    """A kit check as ``lemon validate`` runs it: its name, the name in words, and the
    unbound method (called with a kit instance and the target)."""

    name: str
    description: str
    method: Callable[[BackendConformance, ConformanceTarget], None]


# Checks of the plugin's code rather than of this machine: the plugin's CI runs them.
NOT_IN_THE_FIELD = {
    "test_owner_hooks_reach_only_the_backend_owner": (
        "owner dispatch is a property of the plugin's code, checked by its CI"
    ),
    "test_chat_backends_run_the_chat_kit": "which kit class a plugin's tests use is its CI's",
}


def kit_class(endpoints: Collection[str] | None = None) -> type[BackendConformance]:
    """The kit for a backend declaring ``endpoints``: ``ChatConformance`` when it serves
    chat (or ``endpoints`` is ``None``), else :class:`BackendConformance`."""
    from lemoncore.validation.chatsuite import ChatConformance

    return ChatConformance if endpoints is None or serves_chat(endpoints) else BackendConformance


def field_checks(endpoints: Collection[str] | None = None) -> list[KitCheck]:
    """The kit's checks ``lemon validate`` runs for a backend declaring ``endpoints``
    (``None``: a chat backend's), in the class's order: the chat checks only for a
    backend that serves chat; the description is the method's name in words."""
    kit = kit_class(endpoints)
    names = [n for c in reversed(kit.__mro__) for n in vars(c) if n.startswith("test_")]
    return [
        KitCheck(
            n.removeprefix("test_"), n.removeprefix("test_").replace("_", " "), getattr(kit, n)
        )
        for n in dict.fromkeys(names)
        if n not in NOT_IN_THE_FIELD
    ]
