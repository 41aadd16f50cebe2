"""lemon-plugin-oci: experimental engines as locked-down OCI containers (podman, docker).

``plugin`` is the entry point: an :class:`OciPlugin` with the real engines. Tests (and
administrators embedding lemoncore) can build one with other policies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from importlib.resources import files
from typing import Any

from lemoncore import hookimpl
from lemoncore.hosts import HostInfo
from lemoncore.launch import InstallPlan, LaunchContext, LaunchRefused, StartupTask
from lemoncore.lock import Pin
from lemoncore.recipes import Backend, BackendContribution, DeviceKind, ModelInfo, Recipe

from lemon_plugin_oci.engine import SOCKET, Mount, RunRequest, find_engine
from lemon_plugin_oci.installer import ImageInstaller
from lemon_plugin_oci.policy import ContainerPolicy
from lemon_plugin_oci.recipes import CONTRIBUTIONS, POLICIES, RECIPES
from lemon_plugin_oci.refs import TRUSTED_NAMESPACES, ImageRef, parse_ref
from lemon_plugin_oci.server import OWNER_LABEL, ContainerServer, socket_dir, sweep
from lemon_plugin_oci.setup import Facts, check, gather


def _default_lock() -> Mapping[str, Any]:
    data: Mapping[str, Any] = json.loads(files(__package__).joinpath("lock.json").read_text())
    return data


class OciPlugin:
    def __init__(self, recipes: Sequence[Recipe] = RECIPES,
                 contributions: Sequence[BackendContribution] = CONTRIBUTIONS,
                 policies: Mapping[tuple[str, str], ContainerPolicy] = POLICIES,
                 lock: Mapping[str, Any] | None = None, models: Sequence[ModelInfo] = (),
                 facts: Callable[[], Facts] = gather) -> None:
        self.recipes, self.contributions, self.policies = recipes, contributions, policies
        self.lock, self.models, self.facts = lock, models, facts

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        return self.recipes

    @hookimpl
    def register_backends(self) -> Sequence[BackendContribution]:
        return self.contributions

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return self.models

    @hookimpl
    def register_lock(self) -> Mapping[str, Any]:
        return self.lock if self.lock is not None else _default_lock()

    def _ref(self, pin: Pin, config: Mapping[str, Any]) -> ImageRef:
        artifact = pin.artifacts[0]
        trusted = (*TRUSTED_NAMESPACES, *config.get("trusted_namespaces", ()))
        ref = parse_ref(artifact.url, trusted)
        if ref.digest != f"sha256:{artifact.sha256}":
            raise LaunchRefused(f"{artifact.url}: the pinned sha256 and the reference's digest "
                                "differ; fix the lock")
        return ref

    @hookimpl
    def install(self, recipe: Recipe, backend: Backend, config: Mapping[str, Any],
                pin: Pin | None) -> InstallPlan:
        policy = self.policies[recipe.name, backend.name]
        facts = self.facts()
        if (problem := check(facts, policy.devices)) is not None:
            return InstallPlan("", message=problem.message, action=problem.action)
        if pin is None or not pin.artifacts:
            return InstallPlan("", message="no image is pinned for this platform",
                               action="pin one in an administrator lock file")
        if not pin.artifacts[0].sha256:
            return InstallPlan(pin.version, artifacts=pin.artifacts)  # core: unverified
        try:
            ref = self._ref(pin, config)
        except LaunchRefused as exc:
            return InstallPlan("", message=str(exc), action="fix the pin in the lock file")
        assert facts.engine is not None
        return InstallPlan(pin.version, artifacts=pin.artifacts,
                           installer=ImageInstaller(facts.engine, ref),
                           message=f"{facts.engine.kind} image {ref}")

    @hookimpl
    def launch(self, recipe: Recipe, backend: Backend, model: ModelInfo,
               context: LaunchContext, host: HostInfo) -> ContainerServer:
        policy = self.policies[recipe.name, backend.name]
        facts = self.facts()
        engine = facts.engine or find_engine()
        if engine is None:
            raise LaunchRefused("no container tool: install podman")
        record = context.installed
        ref = parse_ref(record["artifacts"][0]["url"],  # vetted again at every start
                        (*TRUSTED_NAMESPACES, *context.config.get("trusted_namespaces", ())))
        inside = f"/models/{context.model_path.name}"
        values = {"model": inside, "ctx_size": str(context.options.get("ctx_size", 4096)),
                  "socket": SOCKET}
        env = {k: v.format(**values) for k, v in policy.env.items()}
        if "/dev/kfd" in policy.devices:  # the one GPU of a family the backend supports
            families = {f for row in backend.support
                        for f in row.devices.get(DeviceKind.AMD_GPU, frozenset())}
            gpus = [d for d in host.devices if d.kind is DeviceKind.AMD_GPU
                    and (not families or d.family in families)]
            env["HIP_VISIBLE_DEVICES"] = str(gpus[0].index if gpus else 0)
        request = RunRequest(
            name=f"lemon-{context.instance}-{re.sub(r'[^a-zA-Z0-9_.-]', '-', model.name)}",
            image=ref.pinned, command=tuple(a.format(**values) for a in policy.command),
            socket_dir=socket_dir(), devices=tuple(sorted(policy.devices)),
            ipc_host=policy.ipc_host, env=env,
            mounts=(Mount(str(context.model_path), inside, relabel=context.model_owned),),
            labels={OWNER_LABEL: context.instance, "org.lemoncore.model": model.name,
                    "org.lemoncore.backend": f"{recipe.name}:{backend.name}"},
            group_ids=_gpu_group_ids())
        return ContainerServer(model.name, engine, ref, str(record.get("result", "")), policy,
                               request, facts.present_devices)

    @hookimpl
    def startup_tasks(self, instance: str) -> Sequence[StartupTask]:
        engine = find_engine()
        if engine is None:
            return []

        async def sweep_leftovers() -> None:
            await sweep(engine, instance)

        return [sweep_leftovers]


def _gpu_group_ids() -> tuple[int, ...]:
    import grp

    ids = []
    for name in ("video", "render"):
        try:
            ids.append(grp.getgrnam(name).gr_gid)
        except KeyError:
            pass
    return tuple(ids)


plugin = OciPlugin()
