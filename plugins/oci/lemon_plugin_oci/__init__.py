"""lemon-plugin-oci: experimental engines as locked-down OCI containers (podman, docker).

``plugin`` is the entry point: an :class:`OciPlugin` with the real engines. Tests (and
administrators embedding lemoncore) can build one with other policies. Importing it loads
no HTTP client and no logging stack: the container server, the installer and the registry
client are imported by the hooks that use them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lemoncore.plugin import (
    Backend,
    BackendContribution,
    Checkpoint,
    DeviceKind,
    FieldCheck,
    HostDevice,
    HostInfo,
    InstallPlan,
    LaunchContext,
    LaunchRefused,
    Migration,
    ModelInfo,
    Pin,
    Recipe,
    StartupTask,
    hookimpl,
)

from lemon_plugin_oci import memory, migration, validate
from lemon_plugin_oci.contracts import CONTRACTS, SOCKET, LaunchContract
from lemon_plugin_oci.engine import identity
from lemon_plugin_oci.launching import Inputs, model_files
from lemon_plugin_oci.recipes import CONTRIBUTIONS, RECIPES
from lemon_plugin_oci.refs import TRUSTED_NAMESPACES, ImageRef, parse_ref, parse_tagged
from lemon_plugin_oci.requirements import ctx_problem, kernel_problem
from lemon_plugin_oci.setup import Facts, check, gather
from lemon_plugin_oci.sockets import SocketDirs, runtime_base

if TYPE_CHECKING:
    from lemon_plugin_oci.registry import TagRefresher
    from lemon_plugin_oci.server import ContainerServer


def _warn(event: str, **fields: str) -> None:
    import structlog

    structlog.get_logger("lemon_plugin_oci").warning(event, **fields)


def _curated_models() -> list[ModelInfo]:
    raw = json.loads(files(__package__).joinpath("models.json").read_text())
    return [ModelInfo(**entry) for entry in raw]


def _default_lock() -> Mapping[str, Any]:
    data: Mapping[str, Any] = json.loads(files(__package__).joinpath("lock.json").read_text())
    return data


class OciPlugin:
    def __init__(
        self,
        recipes: Sequence[Recipe] = RECIPES,
        contributions: Sequence[BackendContribution] = CONTRIBUTIONS,
        contracts: Mapping[tuple[str, str], LaunchContract] = CONTRACTS,
        lock: Mapping[str, Any] | None = None,
        models: Sequence[ModelInfo] | None = None,
        facts: Callable[[], Facts] = gather,
        find_native_ds4: Callable[[], Migration | None] = lambda: migration.native_ds4(
            os.environ, Path.home()
        ),
    ) -> None:
        self.recipes, self.contributions, self.contracts = recipes, contributions, contracts
        self.lock, self.models, self.facts = lock, models, facts
        self.find_native_ds4 = find_native_ds4

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        return self.recipes

    @hookimpl
    def register_backends(self) -> Sequence[BackendContribution]:
        return self.contributions

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return _curated_models() if self.models is None else self.models

    @hookimpl
    def register_lock(self) -> Mapping[str, Any]:
        return self.lock if self.lock is not None else _default_lock()

    def _ref(self, pin: Pin, config: Mapping[str, Any]) -> ImageRef:
        artifact = pin.artifacts[0]
        trusted = (*TRUSTED_NAMESPACES, *config.get("trusted_namespaces", ()))
        ref = parse_ref(artifact.url, trusted)
        if ref.digest != f"sha256:{artifact.sha256}":
            raise LaunchRefused(
                f"{artifact.url}: the pinned sha256 and the reference's digest differ; fix the lock"
            )
        return ref

    @hookimpl
    def install(
        self, recipe: Recipe, backend: Backend, config: Mapping[str, Any], pin: Pin | None
    ) -> InstallPlan:
        contract = self.contracts[recipe.name, backend.name]
        if recipe.name == migration.NAME and (left := self.find_native_ds4()):
            return InstallPlan(
                "",
                message=left.message,
                action=f"lemon backends migrate {left.name} --yes (removes {left.paths[0]})",
            )
        facts = self.facts()
        if (problem := check(facts, contract.devices)) is not None:
            return InstallPlan("", message=problem.message, action=problem.action)
        if why := kernel_problem(contract, facts.kernel):
            return InstallPlan("", message=why, action="install a newer kernel, then reboot")
        if why := ctx_problem(contract, config.get("ctx_size"), config, recipe.name):
            return InstallPlan("", message=why, action="fix the recipe's configuration section")
        if pin is None or not pin.artifacts:
            return InstallPlan(
                "",
                message="no image is pinned for this platform",
                action="pin one in an administrator lock file",
            )
        if not pin.artifacts[0].sha256:
            name = f"{recipe.name}:{backend.name}"
            return InstallPlan(
                "",
                message=f"no digest is pinned for "
                f"{pin.artifacts[0].url.removeprefix('docker://')} (none has "
                "been published)",
                action=f"lemon lock refresh {name} --yes "
                f"(asks the registry what the tag names now and pins it); "
                f"then lemon backends install {name}",
            )
        try:
            ref = self._ref(pin, config)
        except LaunchRefused as exc:
            return InstallPlan("", message=str(exc), action="fix the pin in the lock file")
        assert facts.engine is not None
        from lemon_plugin_oci.installer import ImageInstaller

        return InstallPlan(
            pin.version,
            artifacts=pin.artifacts,
            installer=ImageInstaller(facts.engine, ref, recipe.name, backend.name),
            message=f"{facts.engine.kind} image {ref}",
        )

    @hookimpl
    def preflight(
        self,
        recipe: Recipe,
        backend: Backend,
        config: Mapping[str, Any],
        options: Mapping[str, Any],
    ) -> None:
        """Refuse, before anything is evicted, a load its engine would refuse: an old
        kernel, a context past the native one without its rope factor."""
        contract = self.contracts[recipe.name, backend.name]
        why = kernel_problem(contract, self.facts().kernel) or ctx_problem(
            contract, options.get("ctx_size"), config, recipe.name
        )
        if why:
            raise LaunchRefused(why)

    @hookimpl
    def launch(
        self,
        recipe: Recipe,
        backend: Backend,
        model: ModelInfo,
        context: LaunchContext,
        host: HostInfo,
    ) -> ContainerServer:
        from lemon_plugin_oci.server import OWNER_LABEL, ContainerServer

        contract = self.contracts[recipe.name, backend.name]
        facts = self.facts()
        if facts.engine is None:
            raise LaunchRefused("no container tool: install podman")
        why = kernel_problem(contract, facts.kernel) or ctx_problem(
            contract, context.options.get("ctx_size"), context.config, recipe.name
        )
        if why:
            raise LaunchRefused(why)
        ref = parse_ref(
            context.installed["artifacts"][0]["url"],  # vetted at every start
            (*TRUSTED_NAMESPACES, *context.config.get("trusted_namespaces", ())),
        )
        gpu = chosen_gpu(backend, host) if contract.devices else None
        found = model_files(
            contract.files,
            context.model_path,
            checkpoint_name(model),
            context.model_dir,
            context.model_roots,
            context.model_owned,
        )
        who = identity(facts.engine, os.geteuid(), os.getegid(), facts.gpu_group_ids)
        base = runtime_base(context.install_dir.parent, facts.engine.host.host_path)
        sockets = SocketDirs(base, who.uid)
        values = {
            "socket": SOCKET,
            "served": model.name,
            "port": str(contract.tcp_port or ""),
            "ctx_size": str(context.options.get("ctx_size", "")),
            "expert_cache": expert_cache(gpu),
        }
        inputs = Inputs(
            name=container_name(context.instance, model.name),
            image=ref.pinned,
            socket_dir=str(sockets.engine),
            files=found,
            gpu=gpu,
            values=values,
            config=context.config,
            identity=who,
            memlock_grantable=facts.memlock_grantable,
            kfd=facts.kfd,
            labels={
                OWNER_LABEL: context.instance,
                "org.lemoncore.model": model.name,
                "org.lemoncore.backend": f"{recipe.name}:{backend.name}",
            },
        )
        if contract.memlock_unlimited and facts.memlock_advice:
            _warn("memlock", model=model.name, advice=facts.memlock_advice)
        check_gib = context.config.get("memory_check_gib")
        return ContainerServer(
            model.name,
            facts.engine,
            ref,
            str(context.installed.get("result", "")),
            contract,
            inputs,
            sockets,
            facts.present_devices,
            None if check_gib is None else float(check_gib),
            {
                f"{r}:{b}": c.min_host_gib
                for (r, b), c in self.contracts.items()
                if c.pins_page_cache
            },
        )

    @hookimpl
    def register_field_checks(self) -> Sequence[FieldCheck]:
        return validate.field_checks(self.contracts)

    @hookimpl
    def migrations(self) -> Sequence[Migration]:
        found = self.find_native_ds4()
        return [found] if found else []

    @hookimpl
    def refresher(
        self, recipe: Recipe, backend: Backend, config: Mapping[str, Any], pin: Pin
    ) -> TagRefresher | None:
        from lemon_plugin_oci.registry import TagRefresher

        trusted = (*TRUSTED_NAMESPACES, *config.get("trusted_namespaces", ()))
        try:
            return TagRefresher(*parse_tagged(pin.artifacts[0].url, trusted))
        except LaunchRefused:
            return None

    @hookimpl
    def startup_tasks(self, instance: str) -> Sequence[StartupTask]:
        async def sweep_and_notice() -> None:
            from lemon_plugin_oci.server import sweep

            if left := self.find_native_ds4():
                _warn(
                    "migration available",
                    message=left.message,
                    action=f"lemon backends migrate {left.name}",
                )
            if (engine := self.facts().engine) is not None:
                await sweep(engine, instance)

        return [sweep_and_notice]


def chosen_gpu(backend: Backend, host: HostInfo) -> HostDevice:
    """The first AMD GPU of a family the backend supports, in ROCm's order."""
    families = {
        f for row in backend.support for f in row.devices.get(DeviceKind.AMD_GPU, frozenset())
    }
    for device in host.devices:
        if device.kind is DeviceKind.AMD_GPU and (not families or device.family in families):
            return device
    raise LaunchRefused(f"no AMD GPU of {', '.join(sorted(families)) or 'any family'} found")


def expert_cache(gpu: HostDevice | None) -> str:
    """Half the GPU's memory pool for DS4's expert cache, e.g. ``30GB``; "" (the flag left
    out) when unknown or under 1 GB, since ds4-server refuses ``0GB`` (kyuz0/ds4
    ``ds4_server.c`` ``parse_options``; antirez/ds4 ``ds4_ssd.c``
    ``ds4_parse_gib_arg``: a positive count)."""
    found = memory.read(gpu.render_node) if gpu and gpu.render_node else None
    gib = (found.gtt + found.vram) // 2 // memory.GIB if found else 0
    return f"{gib}GB" if gib else ""


def checkpoint_name(model: ModelInfo) -> str:
    """The checkpoint's file name as named (a resolved Hugging Face file is a hash)."""
    cp = Checkpoint.parse(model.checkpoint)
    return Path(cp.filename or cp.location).name


def container_name(instance: str, model: str) -> str:
    """Unique per model: names differing only in characters a container name cannot
    hold (``a+b``, ``a-b``) get different hash suffixes."""
    digest = hashlib.sha256(model.encode()).hexdigest()[:16]
    return f"lemon-{instance}-{re.sub(r'[^a-zA-Z0-9_.-]', '-', model)}-{digest}"


plugin = OciPlugin()
