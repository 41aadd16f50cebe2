"""A model served from a container: the ``Runner`` lemoncore awaits.

Start: verify the local image against the pin (a start never downloads), narrow the
contract by the image's labels, check memory, build the run command, remove any leftover
of the same name, ``run -d``, start the relay for a TCP-only engine, adopt the engine's
socket (:mod:`lemon_plugin_oci.sockets`) and probe health over it. While it runs:
``wait`` notices the container ending, ``logs -f`` feeds lemoncore's log, and a drift
check (:mod:`lemon_plugin_oci.drift`) compares the running container's inspected
configuration with what was launched: on a difference it logs the difference, removes the
container and launches it again; requests wait meanwhile
(:mod:`lemon_plugin_oci.transport`).
Stop: ``stop``, then ``rm``.

Its :class:`~lemoncore.launch.Lifecycle`: ``ready`` once the first container answers
(a relaunch after drift stays ``ready``, requests waiting meanwhile), ``draining`` when
:meth:`ContainerServer.stop` begins, ``stopped`` when it has ended; ``crashed`` when the
container ends on its own, is replaced, or cannot be relaunched. A start that fails
removes what it ran (``stopped``) unless the container had already ended (``crashed``).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc
import httpx
import structlog

from lemoncore.plugin import (
    EngineOutput,
    LaunchRefused,
    Lifecycle,
    ServerState,
    StartError,
    pump_engine_output,
    wait_healthy,
)

from lemon_plugin_oci import memory
from lemon_plugin_oci.cgroups import cgroup_peak_memory
from lemon_plugin_oci.contracts import SOCKET, LaunchContract
from lemon_plugin_oci.drift import drift, launched_config, misbehaviour
from lemon_plugin_oci.engine import Engine, relay_argv, run, run_argv, running_with_label
from lemon_plugin_oci.installer import labels, verified_image
from lemon_plugin_oci.launching import Inputs, run_request
from lemon_plugin_oci.policy import narrowed
from lemon_plugin_oci.refs import ImageRef
from lemon_plugin_oci.requirements import ctx_problem
from lemon_plugin_oci.sockets import SocketDirs
from lemon_plugin_oci.transport import WhenServing, engine_transport

log = structlog.get_logger("lemon_plugin_oci")
OWNER_LABEL = "org.lemoncore.owner"
DRIFT_CHECK_SECONDS = 1.0


class ContainerServer(Lifecycle):
    def __init__(
        self,
        model: str,
        engine: Engine,
        ref: ImageRef,
        image_id: str,
        contract: LaunchContract,
        inputs: Inputs,
        sockets: SocketDirs,
        present_devices: frozenset[str],
        memory_check_gib: float | None,
        pinned: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__()
        self.engine, self.ref, self.image_id = engine, ref, image_id
        self.contract, self.inputs, self.sockets = contract, inputs, sockets
        self.present_devices, self.memory_check_gib = present_devices, memory_check_gib
        self.pinned = dict(pinned or {})  # backend -> GiB MemAvailable counts as free
        self.name = model
        self.base_url = "http://engine"
        self._serving = anyio.Event()
        self.transport: httpx.AsyncBaseTransport = WhenServing(
            engine_transport(str(sockets.socket), relayed=contract.tcp_port is not None),
            lambda: self._serving,
        )
        self.container_id = ""
        self.reason = ""
        self._argv: tuple[str, ...] = ()
        self._launched: dict[str, object] = {}
        self._lock: anyio.Lock | None = None  # a drift relaunch, or a stop
        self._relaunch_scope: anyio.CancelScope | None = None
        self._relaunching = False
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

    def peak_memory(self) -> int | None:
        """Peak memory of the container's cgroup (every process in it); GPU memory is
        not counted."""
        return None if self.exited.is_set() else cgroup_peak_memory(self._pid)

    @property
    def alive(self) -> bool:
        """Started and not ended; a relaunch after drift keeps it alive."""
        return bool(self._launched) and super().alive

    async def start(self, task_group: anyio.abc.TaskGroup, ready_within: float) -> None:
        try:
            await self._start(task_group, ready_within)
            self.mark_ready()
        except BaseException as exc:
            self.sockets.remove()
            if not self.container_id:
                self.begin_stop()  # nothing ran: refused, not crashed
            self._finish(f"start failed: {exc}")  # unless its end is already recorded
            raise

    async def _start(self, task_group: anyio.abc.TaskGroup, ready_within: float) -> None:
        image = await verified_image(
            self.engine,
            self.ref,
            self.image_id,
            self.inputs.labels.get("org.lemoncore.backend", ""),
        )
        contract = narrowed(self.contract, labels(image), str(self.ref))
        missing = sorted(d for d in contract.devices if d not in self.present_devices)
        if missing:
            raise LaunchRefused(f"{', '.join(missing)} not present on this host")
        ctx = self.inputs.values.get("ctx_size", "")
        recipe = self.inputs.labels.get("org.lemoncore.backend", "").partition(":")[0]
        size = int(ctx) if ctx.isdigit() else None
        if why := ctx_problem(contract, size, self.inputs.config, recipe):
            raise LaunchRefused(f"{self.ref}: {why}")  # labels may drop its rope setting
        await self._check_memory(contract)
        if contract.ipc_host or contract.cap_add:
            log.warning(
                "container has elevated settings from its contract",
                model=self.name,
                ipc_host=contract.ipc_host,
                cap_add=sorted(contract.cap_add),
            )
        self._argv = tuple(run_argv(self.engine, run_request(contract, self.inputs)))
        await self._launch(task_group, ready_within)
        task_group.start_soon(self._watch_drift, task_group, ready_within)

    async def _check_memory(self, contract: LaunchContract) -> None:
        host, device = (
            (contract.min_host_gib, contract.min_device_gib)
            if self.memory_check_gib is None
            else (self.memory_check_gib, 0.0)
        )
        if host + device <= 0:
            return
        gpu = self.inputs.gpu
        found = memory.read(gpu.render_node if gpu and contract.devices else "")
        found = replace(found, held=int(await self._held_gib() * memory.GIB))
        if why := memory.problem(host, device, found, contract.memory_hint):
            raise LaunchRefused(f"{self.ref} {why}")

    async def _held_gib(self) -> float:
        """GiB that running engines of lemoncore (any instance this tool shows) hold while
        ``MemAvailable`` counts it as free: each running container of a backend in
        ``pinned`` (Halogen's locked weights), found by its backend label."""
        total = 0.0
        for backend, gib in self.pinned.items():
            names = await running_with_label(self.engine, f"org.lemoncore.backend={backend}")
            total += gib * sum(1 for n in names if n != self.inputs.name)
        return total

    async def _launch(self, task_group: anyio.abc.TaskGroup, ready_within: float) -> None:
        """Run the container and wait until it answers; stop it if it does not."""
        await run(self.engine, "rm", "-f", self.inputs.name)
        log.info("container run", model=self.name, command=" ".join(self._argv))
        code, out, err = await run(self.engine, *self._argv[1:])
        if code != 0:
            raise LaunchRefused(f"{self.engine.kind} run failed: {err.strip()[-500:]}")
        self.container_id = out.strip()
        state = await self._inspect(self.container_id)
        self._pid = int(state["State"]["Pid"]) if state else None
        self._launched = launched_config(state or {}, self._pid)
        ended = anyio.Event()
        task_group.start_soon(self._wait, self.container_id, ended)
        task_group.start_soon(self._pump_logs, self.container_id)
        try:
            if (port := self.contract.tcp_port) is not None:
                code, _, err = await run(
                    self.engine,
                    *relay_argv(self.engine, self.container_id, self.contract.relay, SOCKET, port)[
                        1:
                    ],
                )
                if code != 0:
                    raise StartError(
                        f"the relay to the engine's port {port} did not start: {err.strip()[-300:]}"
                    )
            await self._ready(ready_within, ended)
            self._serving.set()
        except BaseException:
            if self.state is ServerState.STARTING and not ended.is_set():
                self.begin_stop()  # the first start gives up: its end is a stop
            with anyio.CancelScope(shield=True):
                await self._remove(self.container_id, grace=1)
            raise

    async def _ready(self, ready_within: float, ended: anyio.Event) -> None:
        with anyio.move_on_after(ready_within) as scope:
            while not self.sockets.bound() and not ended.is_set():
                with anyio.move_on_after(0.02):  # polls the file system
                    await ended.wait()
        if self.sockets.bound():
            self.sockets.adopt()
            async with httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=str(self.sockets.socket)), timeout=2
            ) as client:
                if await wait_healthy(
                    client,
                    "http://engine" + self.contract.health_path,
                    ended,
                    scope.deadline - anyio.current_time(),
                ):
                    return
        if ended.is_set():  # _wait records why it ended after one more engine call
            with anyio.move_on_after(5):
                await self.exited.wait()
        await anyio.sleep(0.1)  # let the log pump catch the last lines
        raise StartError(
            f"container {self.inputs.name} did not become ready "
            f"({self.reason or 'timeout'}). Last output:\n" + "\n".join(self.last_lines)
        )

    async def _inspect(self, container: str) -> dict[str, Any] | None:
        code, out, _ = await run(self.engine, "container", "inspect", container)
        return json.loads(out)[0] if code == 0 else None

    async def _wait(self, container: str, ended: anyio.Event) -> None:
        code, out, _ = await run(self.engine, "wait", container)
        ended.set()
        if container != self.container_id or self._relaunching:
            return  # the relaunch reports
        self._code = int(out.strip()) if code == 0 and out.strip().lstrip("-").isdigit() else None
        reason = await self._replacement()
        self._finish(self.reason or reason or f"container ended (exit code {self._code})")

    async def _replacement(self) -> str:
        """If another container now holds our name, say how it differs and remove it."""
        code, out, _ = await run(self.engine, "container", "inspect", self.inputs.name)
        if code != 0 or self.stopping:
            return ""
        squatter = json.loads(out)[0]
        if squatter["Id"] == self.container_id:
            return ""
        created = squatter.get("Config", {}).get("CreateCommand") or []
        extra = [a for a in created if a not in self._argv]
        await run(self.engine, "rm", "-f", squatter["Id"])
        return (
            f"drift: container {self.inputs.name} was replaced by another one"
            f"{' with ' + ' '.join(extra) if extra else ''}; it was removed"
        )

    def _finish(self, reason: str) -> None:
        """Record the end (once): ``stopped`` after :meth:`stop` began, else ``crashed``."""
        if self.state.ended:
            return
        self.reason = reason
        self.mark_exited(reason=reason)

    async def _pump_logs(self, container: str) -> None:
        """Relay the container's output to lemoncore's log as the supervisor does (lines
        bounded, escaped, rate-limited: :mod:`lemoncore.outputlines`). A failure to read
        it ends this container (a crash, restarted as any), never the router."""
        output = EngineOutput(log, self.last_lines, model=self.name, source="backend")
        try:
            process = await anyio.open_process(
                [*self.engine.command, "logs", "-f", container], stderr=-2
            )  # STDOUT
            async with process:
                assert process.stdout is not None
                await pump_engine_output(functools.partial(_receive, process.stdout), output)
        except Exception:  # this container's business only: log it, end it
            log.exception("container output could not be read", model=self.name)
            with contextlib.suppress(OSError):  # the tool itself gone: the drift check sees it
                await run(self.engine, "kill", container)

    async def _watch_drift(self, task_group: anyio.abc.TaskGroup, ready_within: float) -> None:
        """Relaunch a container that no longer is what was launched."""
        while not self.exited.is_set():
            await anyio.sleep(DRIFT_CHECK_SECONDS)
            container = self.container_id
            state = await self._inspect(container)
            if (
                state is None
                or not state.get("State", {}).get("Running")
                or self.stopping
                or container != self.container_id
            ):
                continue  # ending: _wait reports it
            differences = drift(self._launched, launched_config(state, self._pid))
            differences += await misbehaviour(self.sockets, self.contract.tcp_port)
            if differences:
                await self._relaunch(container, differences, task_group, ready_within)

    def _exclusive(self) -> anyio.Lock:
        if self._lock is None:  # made in the event loop, not in the (sync) launch hook
            self._lock = anyio.Lock()
        return self._lock

    async def _relaunch(
        self,
        container: str,
        differences: list[str],
        task_group: anyio.abc.TaskGroup,
        ready_within: float,
    ) -> None:
        """Remove the container and launch it again (the image verified again) while
        requests wait; a stop cancels it."""
        async with self._exclusive():
            if self.stopping:
                return
            log.warning("container drift; relaunching", model=self.name, differences=differences)
            self._relaunching, self.container_id = True, ""
            self._serving = anyio.Event()  # requests wait for the relaunch
            with anyio.CancelScope() as self._relaunch_scope:
                try:
                    with anyio.CancelScope(shield=True):
                        await self._remove(container, grace=2)
                    await verified_image(
                        self.engine,
                        self.ref,
                        self.image_id,
                        self.inputs.labels.get("org.lemoncore.backend", ""),
                    )
                    await self._launch(task_group, ready_within)
                    log.info("container relaunched after drift", model=self.name)
                except Exception as exc:  # noqa: BLE001 - reported as the reason it ended
                    self._finish(f"drift ({'; '.join(differences)}); relaunch failed: {exc}")
                finally:
                    self._relaunching = False
                    self._serving.set()  # waiting requests go on, or fail at once

    async def stop(self, grace: float) -> None:
        """Remove the container (``draining``, then ``stopped``); after a crash, clean up
        what is left (a crash stays a crash)."""
        self.begin_stop()
        if self._relaunch_scope is not None:
            self._relaunch_scope.cancel()
        self._serving.set()
        async with self._exclusive():
            await self._remove(self.container_id, grace)
        with anyio.move_on_after(5):
            await self.exited.wait()
        self._finish("stopped")
        self.sockets.remove()

    async def _remove(self, container: str, grace: float) -> None:
        if container:
            await run(self.engine, "stop", "-t", str(int(grace)), container)
            await run(self.engine, "rm", "-f", container)
        self.sockets.reset()


async def _receive(stream: anyio.abc.ByteReceiveStream) -> bytes:
    """The next chunk of ``stream``; ``b""`` at its end."""
    try:
        return await stream.receive()
    except anyio.EndOfStream:
        return b""


async def sweep(engine: Engine, instance: str) -> int:
    """Remove containers left by this lemoncore installation (and only those)."""
    code, out, _ = await run(
        engine, "ps", "-a", "--filter", f"label={OWNER_LABEL}={instance}", "--format", "{{.ID}}"
    )
    ids = out.split() if code == 0 else []
    for cid in ids:
        await run(engine, "rm", "-f", cid)
    if ids:
        log.warning("removed leftover containers", count=len(ids))
    return len(ids)
