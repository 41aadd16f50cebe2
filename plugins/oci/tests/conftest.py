"""The container tests' fixtures: the expensive ones (the private docker daemon, the
local registry and the images pushed to it) start once for the session, whichever
``test_containers_*.py`` modules run, and stop at its end; ``tool`` picks podman or
docker for each test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lemon_plugin_oci import setup

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from containers_support import Registry, Tool, local_registry, private_dockerd, pushed_images
from rootless_support import RootlessPodman, require_rootless, rootless_podman, rootless_user


@pytest.fixture(scope="session")
def dockerd() -> Iterator[str]:
    """The private docker daemon's ``DOCKER_HOST``."""
    with private_dockerd() as host:
        yield host


@pytest.fixture(params=["podman", "docker"])
def tool(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Tool:
    """lemoncore runs its containers with this tool (``LEMON_OCI_ENGINE``)."""
    if request.param == "docker":
        monkeypatch.setenv("DOCKER_HOST", request.getfixturevalue("dockerd"))
    monkeypatch.setenv("LEMON_OCI_ENGINE", request.param)
    monkeypatch.setattr(setup, "_CACHE", None)
    return Tool(request.param)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with local_registry(tmp_path_factory.mktemp("oci")) as running:
        yield running


@pytest.fixture(scope="session")
def images(registry: Registry) -> Iterator[dict[str, str]]:
    with pushed_images(registry) as pushed:
        yield pushed


@pytest.fixture(scope="session")
def rootless(request: pytest.FixtureRequest) -> Iterator[RootlessPodman]:
    """Rootless podman as the test user (``scripts/rootless-user``; the user running the
    tests when not root), for the session; skipped (on CI: failed) before the registry
    starts where it cannot run."""
    require_rootless(rootless_user())
    with rootless_podman(request.getfixturevalue("registry")) as session:
        yield session
