"""lemoncore in a container or toolbox: the host's container tool named through
``LEMON_OCI_ENGINE_VIA`` or its socket (``CONTAINER_HOST``), and every path lemoncore
passes to it translated to the host's view (``LEMON_OCI_HOST_PATHS``), refused when the
host cannot see it. Pure functions; ``test_containers_inside.py`` runs it for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemoncore.plugin import LaunchRefused

from lemon_plugin_oci import engine
from lemon_plugin_oci.engine import Engine, HostView, Mount, RunRequest, host_view, run_argv
from lemon_plugin_oci.sockets import runtime_base

VIEW = HostView(paths=(("/data", "/srv/lemon"), ("/data/models", "/mnt/models")))


def test_paths_go_through_the_longest_mapped_prefix() -> None:
    assert VIEW.host_path("/data/cache/x.gguf") == "/srv/lemon/cache/x.gguf"
    assert VIEW.host_path("/data/models/m.gguf") == "/mnt/models/m.gguf"
    assert VIEW.host_path("/data") == "/srv/lemon"
    assert HostView().host_path("/anything") == "/anything"  # no mappings: as it is
    with pytest.raises(LaunchRefused, match="LEMON_OCI_HOST_PATHS maps /data, /data/models"):
        VIEW.host_path("/database/x")  # a prefix of the name is not its directory


def test_the_settings_are_read_and_a_malformed_one_is_refused() -> None:
    view = host_view(
        {"LEMON_OCI_HOST_PATHS": "/data=/srv/lemon/, /m=/mnt", "LEMON_OCI_ENGINE_VIA": "a -b"}
    )
    assert view == HostView(("a", "-b"), (("/data", "/srv/lemon"), ("/m", "/mnt")))
    for bad in ("/data", "data=/srv", "/data=srv"):
        with pytest.raises(LaunchRefused, match="INSIDE=HOST with two absolute paths"):
            host_view({"LEMON_OCI_HOST_PATHS": bad})


def test_the_run_command_names_host_paths_through_the_via_command() -> None:
    tool = Engine("podman", "podman", host=HostView(("flatpak-spawn", "--host"), VIEW.paths))
    argv = run_argv(
        tool,
        RunRequest(
            name="c",
            image="r/i@sha256:" + "a" * 64,
            command=("serve",),
            socket_dir="/data/run/c-1/engine",
            mounts=(Mount("/data/models/m.gguf", "/models/m.gguf"),),
        ),
    )
    assert argv[:4] == ["flatpak-spawn", "--host", "podman", "run"]
    assert "type=bind,source=/mnt/models/m.gguf,target=/models/m.gguf,readonly=true" in argv
    assert "/srv/lemon/run/c-1/engine:/run/lemon:rw,Z" in argv
    with pytest.raises(LaunchRefused, match="not in a directory the container tool's host"):
        run_argv(tool, RunRequest("c", "i", (), "/tmp/engine"))


def test_a_tool_behind_a_socket_or_the_via_command_is_remote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEMON_OCI_ENGINE", "podman")
    monkeypatch.setenv("CONTAINER_HOST", "unix:///run/podman/podman.sock")
    found = engine.find_engine(lambda name: f"/usr/bin/{name}")
    assert found is not None and (found.remote, found.rootless) == (True, False)
    monkeypatch.delenv("CONTAINER_HOST")
    monkeypatch.setenv("LEMON_OCI_ENGINE_VIA", "flatpak-spawn --host")
    found = engine.find_engine(lambda name: None)  # not installed in the toolbox itself
    assert found is not None and found.command == ["flatpak-spawn", "--host", "podman"]
    assert found.remote


def test_the_socket_directory_is_one_the_host_can_see(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/")
    assert runtime_base(tmp_path) == Path("/lemoncore")
    shared = HostView(paths=((str(tmp_path), "/srv/lemon"),))
    assert runtime_base(tmp_path, shared.host_path) == tmp_path / "run"
