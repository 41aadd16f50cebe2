"""From a launch contract to a run request: which GPU, which files, which values.

``model_files`` reads the file system (the model and the files beside it); ``run_request``
is a pure function of the (label-narrowed) contract and the inputs decided at launch.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lemoncore.plugin import HostDevice, LaunchRefused

from lemon_plugin_oci.contracts import MODELS_DIR, LaunchContract, ModelFile
from lemon_plugin_oci.engine import Identity, Mount, RunRequest

MAX_DIRECTORY_FILES = 64
SHARD = re.compile(r"(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf")


@dataclass(frozen=True)
class ModelFiles:
    """The model's files as mounts, the environment naming them, and ``{model}``."""

    mounts: tuple[Mount, ...]
    env: Mapping[str, str]
    model: str


def model_files(
    files: tuple[ModelFile, ...],
    model_path: Path,
    name: str,
    model_dir: Path | None,
    roots: tuple[Path, ...],
    owned: bool,
) -> ModelFiles:
    """Mount each file the contract names, read-only, after checking it exists and lies in
    a model directory. ``name`` is the checkpoint's file name (``model_path`` is resolved,
    and a Hugging Face blob's name is its hash). A directory is mounted file by file, so
    a symlink in it (as in the Hugging Face cache) does not dangle in the container."""
    stem = name.rsplit(".", 1)[0]
    # relabel (SELinux) only files in the lemoncore-owned root that holds the model
    own = next((r for r in roots if model_path.is_relative_to(r)), None) if owned else None

    def mount(source: Path, target: str) -> Mount:
        return Mount(str(source), target, relabel=own is not None and source.is_relative_to(own))

    mounts: list[Mount] = []
    env: dict[str, str] = {}
    model = ""
    for wanted in files:
        relative = wanted.name.format(file=name, stem=stem)
        target = posixpath.join(MODELS_DIR, relative)
        if relative == name:
            mounts.append(mount(model_path, target))
            mounts += [
                mount(_beside(shard, model_dir, roots, name), posixpath.join(MODELS_DIR, shard))
                for shard in _shards(name)
            ]
        else:
            source = _beside(relative, model_dir, roots, name)
            if wanted.directory:
                mounts += [
                    mount(s, posixpath.join(target, s_name))
                    for s_name, s in _directory(source, roots)
                ]
            elif source.is_file():
                mounts.append(mount(source, target))
            else:
                raise LaunchRefused(f"{relative} beside {name} is not a file")
        if wanted.env:
            env[wanted.env] = target
        else:
            model = target
    return ModelFiles(tuple(mounts), env, model)


def _beside(relative: str, model_dir: Path | None, roots: tuple[Path, ...], name: str) -> Path:
    if model_dir is None or not (model_dir / relative).exists():
        raise LaunchRefused(
            f"the engine also needs {relative} beside {name}"
            f"{f' in {model_dir}' if model_dir else ''}; download it there"
        )
    real = (model_dir / relative).resolve()
    if not any(real.is_relative_to(root) for root in roots):
        raise LaunchRefused(f"{model_dir / relative} resolves outside the model directories")
    return real


def _shards(name: str) -> list[str]:
    """The other files of a split GGUF named by its first shard (``x-00001-of-00003.gguf``:
    llama.cpp opens the rest beside it)."""
    split = SHARD.fullmatch(name)
    if split is None or split["index"] != "00001":
        return []
    return [
        f"{split['prefix']}-{i:05d}-of-{split['count']}.gguf"
        for i in range(2, int(split["count"]) + 1)
    ]


def _directory(source: Path, roots: tuple[Path, ...]) -> list[tuple[str, Path]]:
    """A flat directory's files, resolved and confined: (name, real path)."""
    if not source.is_dir():
        raise LaunchRefused(f"{source} is not a directory")
    entries = sorted(p for p in source.iterdir() if not p.name.startswith("."))
    if len(entries) > MAX_DIRECTORY_FILES:
        raise LaunchRefused(f"{source} holds more than {MAX_DIRECTORY_FILES} files")
    found = []
    for entry in entries:
        real = entry.resolve()
        if not real.is_file() or not any(real.is_relative_to(root) for root in roots):
            raise LaunchRefused(
                f"{entry} is not a file in a model directory (the engine reads a flat directory)"
            )
        found.append((entry.name, real))
    return found


@dataclass(frozen=True)
class Inputs:
    """What the launch hook decided: everything but the image's labels."""

    name: str
    image: str
    socket_dir: str
    files: ModelFiles
    gpu: HostDevice | None
    values: Mapping[str, str]  # template values: ctx_size, port, expert_cache, ...
    config: Mapping[str, Any]  # administrator options (the contract's settings)
    identity: Identity
    memlock_grantable: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    kfd: str = "/dev/kfd"


def run_request(contract: LaunchContract, inputs: Inputs) -> RunRequest:
    """The container for ``contract``: only the chosen GPU's render node (and ``/dev/kfd``
    for ROCm), that GPU selected by lemoncore's own variables, the contract's command and
    environment filled in, and the model's files mounted read-only."""
    values = {**inputs.values, "model": inputs.files.model}
    devices: list[tuple[str, str]] = []
    env = {k: v.format(**values) for k, v in contract.env.items()}
    if contract.devices:
        gpu = inputs.gpu
        if gpu is None or not gpu.render_node:
            raise LaunchRefused("no AMD GPU with a render node was found for this engine")
        if "/dev/dri" in contract.devices:
            devices.append((gpu.render_node, f"/dev/dri/{Path(gpu.render_node).name}"))
        if "/dev/kfd" in contract.devices:
            devices.append((inputs.kfd, "/dev/kfd"))
            # ROCm sees only GPUs whose render node it can open (libhsakmt topology.c
            # topology_sysfs_check_node_supported), so this one is HIP device 0; the UUID
            # names it whatever the order (ROCR amd_filter_device.cpp)
            env["ROCR_VISIBLE_DEVICES"] = gpu.uuid or "0"
            env["HIP_VISIBLE_DEVICES"] = "0"
    for setting in contract.settings:
        value = inputs.config.get(setting.option.name)
        if value is not None:
            env[setting.key] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    env.update(inputs.files.env)
    return RunRequest(
        name=inputs.name,
        image=inputs.image,
        command=command(contract, values),
        socket_dir=inputs.socket_dir,
        devices=tuple(devices),
        ipc_host=contract.ipc_host,
        memlock_unlimited=contract.memlock_unlimited and inputs.memlock_grantable,
        cap_add=tuple(sorted(contract.cap_add)),
        env=env,
        mounts=inputs.files.mounts,
        labels=inputs.labels,
        identity=inputs.identity,
    )


def command(contract: LaunchContract, values: Mapping[str, str]) -> tuple[str, ...]:
    """The engine's argv: templates filled in; a group with an empty value dropped."""
    argv: list[str] = []
    for argument in contract.command:
        group = (argument,) if isinstance(argument, str) else argument
        filled = [a.format(**values) for a in group]
        if isinstance(argument, str) or all(filled):
            argv += filled
    return tuple(argv)
