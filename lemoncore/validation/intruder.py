"""The second plugin of the kit's owner-dispatch check: it adds a backend to the recipe
under test and answers every owner hook, so that a call reaching the wrong plugin shows."""

from __future__ import annotations

from pathlib import Path

from lemoncore.hookspecs import hookimpl
from lemoncore.launch import InstallPlan, LaunchSpec
from lemoncore.recipes import Backend, BackendContribution, DeviceKind, SupportRow


class Intruder:
    """A careless plugin: adds a backend to someone else's recipe and answers every call
    of an owner hook without asking whose backend it is."""

    def __init__(self, recipe: str) -> None:
        self.recipe, self.calls = recipe, list[str]()
        self.plan = InstallPlan("intruder", location=Path("."))
        self.spec = LaunchSpec(argv=("intruder",))

    @hookimpl
    def register_backends(self) -> list[BackendContribution]:
        row = SupportRow(
            os=frozenset({"linux", "windows", "darwin"}), devices={DeviceKind.CPU: frozenset()}
        )
        return [
            BackendContribution(
                recipe=self.recipe, backend=Backend(name="intruder", support=(row,))
            )
        ]

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
