"""The conformance kit's checks: :class:`BackendConformance`, the test class plugin
authors subclass (through :mod:`lemoncore.conformance`), and :func:`field_checks`, the
same checks as ``lemon validate`` runs them, without pytest."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypedDict

import httpx
import psutil

from lemoncore.defaults import backend_device_kinds
from lemoncore.fieldchecks import CheckSkipped
from lemoncore.hosts import detect_host
from lemoncore.launch import LaunchContext
from lemoncore.plugins import PluginHost, load_plugins
from lemoncore.recipes import Backend, DeviceKind, ModelInfo, OptionScope, Recipe, SupportRow
from lemoncore.translation import TRANSLATIONS
from lemoncore.validation.intruder import Intruder
from lemoncore.validation.target import SAMPLES, ConformanceTarget, Sample


def _skip(reason: str) -> None:
    """Skip the check: pytest's skip under pytest, :class:`CheckSkipped` elsewhere."""
    pytest = sys.modules.get("pytest")
    if pytest is not None:
        pytest.skip(reason)
    raise CheckSkipped(reason)


class Usage(TypedDict):
    """An answer's ``usage``, as the kit reads it."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def _usage_adds_up(usage: Usage) -> None:
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def _error_shaped(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]


class BackendConformance:
    """Subclass this (its name must start with ``Test``) and provide the target fixture."""

    MESSAGES: ClassVar[list[dict[str, str]]] = [
        {"role": "user", "content": "Count from one to five."}
    ]

    def _chat(self, target: ConformanceTarget, **extra: Any) -> httpx.Response:
        return httpx.post(
            target.server.api + "/chat/completions",
            timeout=120,
            json={"model": target.model, "messages": self.MESSAGES, "max_tokens": 8, **extra},
        )

    def _stream(self, target: ConformanceTarget, **extra: Any) -> list[str]:
        with httpx.stream(
            "POST",
            target.server.api + "/chat/completions",
            timeout=120,
            json={
                "model": target.model,
                "messages": self.MESSAGES,
                "max_tokens": 8,
                "stream": True,
                **extra,
            },
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            return [line[6:] for line in response.iter_lines() if line.startswith("data: ")]

    def test_chat_completion_shape_and_usage(self, conformance_target: ConformanceTarget) -> None:
        body = self._chat(conformance_target).json()
        assert body["object"] == "chat.completion"
        choice = body["choices"][0]
        assert choice["message"]["role"] == "assistant"
        assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
        assert choice["finish_reason"] in {"stop", "length"}
        _usage_adds_up(body["usage"])

    def test_streaming_chunks_end_with_done(self, conformance_target: ConformanceTarget) -> None:
        data = self._stream(conformance_target)
        assert data[-1] == "[DONE]"
        chunks = [json.loads(d) for d in data[:-1]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
        )
        assert text
        assert not any("total_tokens" in (c.get("usage") or {}) for c in chunks)
        assert any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks)

    def test_include_usage_adds_a_usage_chunk(self, conformance_target: ConformanceTarget) -> None:
        data = self._stream(conformance_target, stream_options={"include_usage": True})
        last = json.loads(data[-2])
        assert last["choices"] == []
        _usage_adds_up(last["usage"])

    def test_answers_name_the_served_model(self, conformance_target: ConformanceTarget) -> None:
        """lemoncore passes the engine's answers through: their ``model`` must be the
        name the client asked for, which the launch must give the engine (llama-server:
        ``--alias <model.name>``)."""
        name = conformance_target.model
        fix = (
            "the engine reports model {!r}, not the served name {!r}: make the launch "
            "give the engine the model's name (llama-server: --alias model.name)"
        )
        answered = self._chat(conformance_target).json()["model"]
        assert answered == name, fix.format(answered, name)
        data = self._stream(conformance_target, stream_options={"include_usage": True})
        streamed = {json.loads(d).get("model") for d in data[:-1]}
        assert streamed == {name}, fix.format(sorted(map(str, streamed - {name})), name)

    def test_completions_shape(self, conformance_target: ConformanceTarget) -> None:
        if not conformance_target.completions:
            _skip("the backend declares no /v1/completions")
        body = httpx.post(
            conformance_target.server.api + "/completions",
            timeout=120,
            json={"model": conformance_target.model, "prompt": "One, two,", "max_tokens": 8},
        ).json()
        assert body["object"] == "text_completion"
        assert isinstance(body["choices"][0]["text"], str)
        _usage_adds_up(body["usage"])

    def test_errors_are_openai_shaped(self, conformance_target: ConformanceTarget) -> None:
        api = conformance_target.server.api
        _error_shaped(
            httpx.post(
                api + "/chat/completions",
                json={"model": "no-such-model", "messages": self.MESSAGES},
            ),
            404,
        )
        _error_shaped(
            httpx.post(api + "/chat/completions", json={"model": conformance_target.model}), 400
        )

    def test_ready_means_the_engine_answers(self, conformance_target: ConformanceTarget) -> None:
        url = conformance_target.server.url
        httpx.post(
            url + "/api/v1/load", json={"model_name": conformance_target.model}, timeout=120
        ).raise_for_status()
        loaded = {
            m["model_name"]: m
            for m in httpx.get(url + "/api/v1/health").json()["all_models_loaded"]
        }
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
        rows = tuple(
            SupportRow(
                os=frozenset(r["os"]),
                devices={DeviceKind(k): frozenset(v) for k, v in r["devices"].items()},
            )
            for r in declared["support"]
        )
        kinds = backend_device_kinds(Backend(name=backend_name, support=rows), detect_host())
        httpx.post(
            url + "/api/v1/load", json={"model_name": conformance_target.model}, timeout=120
        ).raise_for_status()
        server = next(
            m
            for m in httpx.get(url + "/api/v1/health").json()["all_models_loaded"]
            if m["model_name"] == conformance_target.model
        )
        assert server["device"] in {k.device.value for k in kinds}
        assert server["is_amd_gpu"] == (kinds == {DeviceKind.AMD_GPU})

    def test_owner_hooks_reach_only_the_backend_owner(
        self, conformance_target: ConformanceTarget
    ) -> None:
        recipe_name, backend_name = conformance_target.backend.split(":")
        installed = load_plugins(None, ())
        owner = installed.registry.backend_owners[recipe_name, backend_name]
        intruder = Intruder(recipe_name)
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
        chat = "/v1/chat/completions"
        plugins.normalize_request(recipe, ours, chat, {"messages": []}, chat)
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
        httpx.post(
            url + "/api/v1/load", json={"model_name": target.model}, timeout=120
        ).raise_for_status()
        kind = next(
            m["type"]
            for m in httpx.get(url + "/api/v1/health").json()["all_models_loaded"]
            if m["model_name"] == target.model
        )
        served = set(backend.endpoints) | {
            path for path, t in TRANSLATIONS.items() if t.target in backend.endpoints
        }
        failed = []
        for path in sorted(served):
            endpoint = registry.endpoints.get(path)
            if endpoint is None or endpoint.model_type.value != kind:
                continue
            sample = target.samples.get(path) or SAMPLES.get(path)
            if sample is None:
                failed.append(f"{path}: no sample request (ConformanceTarget.samples)")
                continue
            request = Sample(**sample)
            if endpoint.body == "multipart":
                request["data"] = {**sample.get("data", {}), endpoint.model_field: target.model}
            else:
                request["json"] = {**sample.get("json", {}), endpoint.model_field: target.model}
            answer = httpx.post(url + path, timeout=120, **request)
            if answer.status_code != 200:
                failed.append(f"{path}: {answer.status_code} {answer.text[:200]}")
        assert not failed, "\n".join(failed)

    def test_unload_stops_the_engine_within_the_grace_period(
        self, conformance_target: ConformanceTarget
    ) -> None:
        url = conformance_target.server.url
        httpx.post(
            url + "/api/v1/load", json={"model_name": conformance_target.model}, timeout=120
        ).raise_for_status()
        pid = next(
            m["pid"]
            for m in httpx.get(url + "/api/v1/health").json()["all_models_loaded"]
            if m["model_name"] == conformance_target.model
        )
        started = time.monotonic()
        httpx.post(
            url + "/api/v1/unload", json={"model_name": conformance_target.model}, timeout=60
        ).raise_for_status()
        assert time.monotonic() - started <= conformance_target.stop_grace + 1
        assert not (pid and psutil.pid_exists(pid)), (
            f"the engine (pid {pid}) still runs after the unload"
        )

    def test_a_declared_option_out_of_bounds_is_refused(
        self, conformance_target: ConformanceTarget
    ) -> None:
        """A load with a bounded number option the backend declares set past its maximum
        answers 400 naming the option, before anything starts: what users may set is what
        the plugin declares, typed and bounded."""
        target, url = conformance_target, conformance_target.server.url
        recipe_name, backend_name = target.backend.split(":")
        recipe = load_plugins(target.plugins_allow, (), target.plugins).registry.recipes[
            recipe_name
        ]
        backend = recipe.backend(backend_name)
        assert backend is not None
        option = next(
            (
                o
                for o in (*recipe.options, *backend.options)
                if o.scope is OptionScope.REQUEST
                and o.type in {"int", "float"}
                and o.maximum is not None
            ),
            None,
        )
        if option is None:
            _skip(f"{target.backend} declares no bounded number option")
            return
        too_big = option.maximum + 1 if option.maximum is not None else 0
        answer = httpx.post(
            url + "/api/v1/load",
            timeout=120,
            json={
                "model_name": target.model,
                "backend": backend_name,
                option.name: int(too_big) if option.type == "int" else too_big,
            },
        )
        _error_shaped(answer, 400)
        assert option.name in answer.json()["error"]["message"], (
            f"the refusal should name the option {option.name!r}: {answer.text}"
        )

    def test_a_crashed_engine_is_loaded_again(self, conformance_target: ConformanceTarget) -> None:
        """Kill the engine: the model is unloaded, and the next request starts a new
        engine and answers (an engine that cannot start twice, on a port or a file it
        left behind, fails here)."""
        target, url = conformance_target, conformance_target.server.url
        httpx.post(
            url + "/api/v1/load", json={"model_name": target.model}, timeout=120
        ).raise_for_status()

        def engine() -> int | None:
            return next(
                (
                    m["pid"]
                    for m in httpx.get(url + "/api/v1/health").json()["all_models_loaded"]
                    if m["model_name"] == target.model
                ),
                None,
            )

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
            f"after a crash the next request should load the model again: {answer.text}"
        )
        assert engine() not in (None, pid)


# Checks of the plugin's code rather than of this machine: the plugin's CI runs them.
NOT_IN_THE_FIELD = {
    "test_owner_hooks_reach_only_the_backend_owner": (
        "owner dispatch is a property of the plugin's code, checked by its CI"
    ),
}


def field_checks() -> list[
    tuple[str, str, Callable[[BackendConformance, ConformanceTarget], None]]
]:
    """The kit's checks ``lemon validate`` runs: (name, description, unbound method), in
    the class's order; the description is the method's name in words."""
    return [
        (name.removeprefix("test_"), name.removeprefix("test_").replace("_", " "), method)
        for name, method in vars(BackendConformance).items()
        if name.startswith("test_") and name not in NOT_IN_THE_FIELD
    ]
