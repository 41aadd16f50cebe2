"""A model served from a container: the ``Runner`` lemoncore awaits.

Start: verify the image, read its labels, narrow the recipe's policy by them, check
memory, remove any leftover of the same name, ``run -d``, then probe health over the
unix socket. While it runs: ``wait`` notices the container ending (killed, stopped,
removed by other software), ``logs -f`` feeds lemoncore's log, and a drift check
compares the running container with what was launched. Stop: ``stop`` by ID, then
``rm``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import structlog

from lemoncore.launch import ExitTracking, LaunchRefused
from lemoncore.supervisor import StartError, wait_healthy

from lemon_plugin_oci.engine import Engine, RunRequest, run, run_argv
from lemon_plugin_oci.installer import verified_image
from lemon_plugin_oci.policy import ContainerPolicy, effective_policy
from lemon_plugin_oci.refs import ImageRef

log = structlog.get_logger("lemon_plugin_oci")
OWNER_LABEL = "org.lemoncore.owner"
SPEC_LABEL = "org.lemoncore.spec"
DRIFT_CHECK_SECONDS = 1.0


def available_memory_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024 / 1024
    return 0.0


class ContainerServer(ExitTracking):
    def __init__(self, model: str, engine: Engine, ref: ImageRef, image_id: str,
                 policy: ContainerPolicy, request: RunRequest,
                 trusted_devices: frozenset[str]) -> None:
        super().__init__()
        self.engine, self.ref, self.image_id, self.policy = engine, ref, image_id, policy
        self.request, self.trusted_devices = request, trusted_devices
        self.name = model
        self.base_url = "http://engine"
        self.transport: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(
            uds=f"{request.socket_dir}/engine.sock")
        self.container_id = ""
        self.reason = ""
        self._argv: tuple[str, ...] = ()
        self._pid: int | None = None
        self._code: int | None = None

    @property
    def argv(self) -> tuple[str, ...]:
        return self._argv

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._code

    @property
    def alive(self) -> bool:
        return bool(self.container_id) and not self.exited.is_set()

    async def start(self, task_group: anyio.abc.TaskGroup, ready_within: float) -> None:
        image = await verified_image(self.engine, self.ref, self.image_id)
        policy = effective_policy(self.policy, image.get("Labels"), str(self.ref))
        missing = sorted(d for d in policy.devices if d not in self.trusted_devices)
        if missing:
            raise LaunchRefused(f"{', '.join(missing)} not present on this host")
        if policy.min_memory_gb and available_memory_gb() < policy.min_memory_gb:
            raise LaunchRefused(
                f"{self.ref} needs about {policy.min_memory_gb:.0f} GB of memory and "
                f"{available_memory_gb():.0f} GB is available; close other programs or "
                "unload models first")
        request = replace(self.request, devices=tuple(sorted(policy.devices)),
                          ipc_host=policy.ipc_host,
                          env={k: v for k, v in self.request.env.items() if k in policy.env})
        argv = run_argv(self.engine, request)
        spec = hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:16]
        labels = {**request.labels, SPEC_LABEL: spec}
        self._argv = tuple(run_argv(self.engine, replace(request, labels=labels)))
        await run(self.engine, "rm", "-f", self.request.name)
        log.info("container run", model=self.name, command=" ".join(self._argv))
        code, out, err = await run(self.engine, *self._argv[1:])
        if code != 0:
            raise LaunchRefused(f"{self.engine.kind} run failed: {err.strip()[-500:]}")
        self.container_id = out.strip()
        state = await self._inspect()
        self._pid = int(state["State"]["Pid"]) if state else None
        task_group.start_soon(self._wait)
        task_group.start_soon(self._pump_logs)
        task_group.start_soon(self._watch_drift, spec)
        try:
            await self._ready(ready_within)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.stop(grace=1)
            raise

    async def _ready(self, ready_within: float) -> None:
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(
                uds=f"{self.request.socket_dir}/engine.sock"), timeout=2) as client:
            if await wait_healthy(client, "http://engine" + self.policy.health_path,
                                  self.exited, ready_within):
                return
        await anyio.sleep(0.1)  # let the log pump catch the last lines
        raise StartError(f"container {self.request.name} did not become ready "
                         f"({self.reason or 'timeout'}). Last output:\n"
                         + "\n".join(self.last_lines))

    async def _inspect(self) -> dict[str, Any] | None:
        code, out, _ = await run(self.engine, "container", "inspect", self.container_id)
        return json.loads(out)[0] if code == 0 else None

    async def _wait(self) -> None:
        code, out, _ = await run(self.engine, "wait", self.container_id)
        self._code = int(out.strip()) if code == 0 and out.strip().lstrip("-").isdigit() \
            else None
        reason = await self._replacement()
        self._finish(self.reason or reason or f"container ended (exit code {self._code})")

    async def _replacement(self) -> str:
        """If another container now holds our name, say how it differs and remove it."""
        code, out, _ = await run(self.engine, "container", "inspect", self.request.name)
        if code != 0 or self._stopping:
            return ""
        squatter = json.loads(out)[0]
        if squatter["Id"] == self.container_id:
            return ""
        created = squatter.get("Config", {}).get("CreateCommand") or []
        extra = [a for a in created if a not in self._argv]
        await run(self.engine, "rm", "-f", squatter["Id"])
        return (f"drift: container {self.request.name} was replaced by another one"
                f"{' with ' + ' '.join(extra) if extra else ''}; it was removed")

    def _finish(self, reason: str) -> None:
        if self.exited.is_set():
            return
        self.reason = reason
        self._mark_exited(reason=reason)

    async def _pump_logs(self) -> None:
        process = await anyio.open_process([self.engine.exe, "logs", "-f", self.container_id],
                                           stderr=-2)  # STDOUT
        async with process:
            assert process.stdout is not None
            buffer = b""
            async for chunk in process.stdout:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    if line := raw.decode(errors="replace").rstrip():
                        self.last_lines.append(line)
                        log.info(line, model=self.name, source="container")

    async def _watch_drift(self, spec: str) -> None:
        """Stop a container that no longer is what was launched."""
        while not self.exited.is_set():
            await anyio.sleep(DRIFT_CHECK_SECONDS)
            state = await self._inspect()
            if state is None or self.exited.is_set():
                continue  # gone: _wait reports it
            created = state.get("Config", {}).get("CreateCommand") or list(self._argv)
            labels = state.get("Config", {}).get("Labels") or {}
            if labels.get(SPEC_LABEL) != spec or list(created) != list(self._argv):
                self._finish("drift: the running container differs from what lemoncore "
                             "launched; it was stopped")
                with anyio.CancelScope(shield=True):
                    await self._remove(grace=2)

    async def stop(self, grace: float) -> None:
        self._stopping = True
        await self._remove(grace)

    async def _remove(self, grace: float) -> None:
        if self.container_id:
            await run(self.engine, "stop", "-t", str(int(grace)), self.container_id)
            await run(self.engine, "rm", "-f", self.container_id)
        with anyio.move_on_after(5):
            await self.exited.wait()
        shutil.rmtree(self.request.socket_dir, ignore_errors=True)


def socket_dir() -> str:
    """A fresh 0700 directory for one container's socket."""
    return tempfile.mkdtemp(prefix="lemon-sock-")


async def sweep(engine: Engine, instance: str) -> int:
    """Remove containers left by this lemoncore installation (and only those)."""
    code, out, _ = await run(engine, "ps", "-a", "--filter", f"label={OWNER_LABEL}={instance}",
                             "--format", "{{.ID}}")
    ids = out.split() if code == 0 else []
    for cid in ids:
        await run(engine, "rm", "-f", cid)
    if ids:
        log.warning("removed leftover containers", count=len(ids))
    return len(ids)
