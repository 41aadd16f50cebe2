"""``scripts/refresh-pins`` against the local registry: a pin whose tag still names it is
current and nothing is proposed; a tag moved to a new good image is proposed into the
lock file, with its provenance, after ``lemon validate`` (the container contract check
included) passed against it; a tag moved to a broken image is not proposed, saying why.

The script runs the real ``lemon`` (``lock refresh``, ``validate``, ``backends``), and
``lemon validate`` its real ``lemon serve``; they load :data:`plugin` through an entry
point this test puts on their ``PYTHONPATH`` (only that plugin is allowed): the OCI plugin
with the test recipe (``boxed.py``: llama-server in a container on the CPU, as
``test_validate_oci.py`` validates it), pinning nothing itself. The lock file the script
refreshes pins it, as the OCI plugin's ``lock.json`` pins the real engines, which need
GPUs this machine does not have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from typing import Any

import pytest

from lemoncore.plugin import ModelInfo, platform_key

from lemon_plugin_oci import OciPlugin

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from boxed import BOXED, CONTRACT
from containers_support import SMOLLM2, Registry, podman, require_container_tools

plugin = OciPlugin(  # the entry point ``refreshtest`` of the lemon processes the script runs
    recipes=[BOXED],
    contributions=[],
    contracts={("boxed", "llama"): CONTRACT},
    lock={},
    models=[ModelInfo(name="boxed-smol", recipe="boxed", checkpoint=SMOLLM2)],
)

require_container_tools()

TESTS = Path(__file__).parent
SCRIPT = TESTS.parents[2] / "scripts" / "refresh-pins"
IMAGE = "pins"  # pushed as <registry>/lemontest/pins:1, the tag the lock pins


def pinned(registry: Registry, digest: str) -> dict[str, Any]:
    """A lock file shaped like the OCI plugin's (a comment, one line per artifact key)
    pinning boxed:llama to ``pins:1`` at ``digest``."""
    return {
        "_comment": "test lock: the tag pins:1 in the local registry",
        "backends": {
            "boxed": {
                "llama": {
                    "version": "1",
                    "platforms": {
                        platform_key("linux"): [
                            {
                                "url": f"docker://{registry.host}/lemontest/{IMAGE}:1@{digest}",
                                "sha256": digest.removeprefix("sha256:"),
                                "provenance": "test: pushed by the test",
                            }
                        ]
                    },
                }
            }
        },
    }


def refresh_pins(tmp: Path, registry: Registry, lock: Path) -> subprocess.CompletedProcess[str]:
    """Run the script on ``lock`` with this test's plugin, as the workflow runs it."""
    site = tmp / "site"
    info = site / "lemon_refresh_test-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lemon-refresh-test\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[lemon]\nrefreshtest = test_refresh_pins:plugin\n")
    recipes = {"boxed": {"trusted_namespaces": [f"{registry.host}/lemontest/"], "ctx_size": 2048}}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(TESTS)]),
        "LEMON_PLUGINS_ALLOW": "refreshtest",
        "LEMON_RECIPES": json.dumps(recipes),
        "LEMON_STOP_GRACE": "2",
        "LEMON_OCI_ENGINE": "podman",
        "LEMON_CONFIG_FILE": str(tmp / "config.toml"),
    }
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            *("--lock", str(lock), "--cache", str(tmp / "scratch")),
            *("--json", "--markdown", str(tmp / "pins.md")),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_moved_tag_is_proposed_only_when_its_image_passes_validation(
    registry: Registry, tmp_path: Path
) -> None:
    rootfs = registry.root / "rootfs.tar"
    first = registry.push(rootfs, IMAGE, {"org.opencontainers.image.version": "1"})
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps(pinned(registry, first), indent=1))
    shipped = lock.read_text()

    current = refresh_pins(tmp_path, registry, lock)
    assert current.returncode == 0, current.stderr
    [row] = json.loads(current.stdout)
    assert row["state"] == "current" and row["name"] == "boxed:llama", row
    assert lock.read_text() == shipped  # nothing proposed

    good = registry.push(rootfs, IMAGE, {"org.opencontainers.image.version": "2"})
    assert good != first
    proposed = refresh_pins(tmp_path, registry, lock)
    assert proposed.returncode == 0, proposed.stdout + proposed.stderr
    [row] = json.loads(proposed.stdout)
    assert row["state"] == "proposed", row
    assert {"backend installed", "container-contract", "model loads"} <= set(row["checks"])
    [artifact] = json.loads(lock.read_text())["backends"]["boxed"]["llama"]["platforms"][
        platform_key("linux")
    ]
    assert artifact["url"] == f"docker://{registry.host}/lemontest/{IMAGE}:1@{good}"
    assert artifact["sha256"] == good.removeprefix("sha256:")
    provenance = artifact["provenance"]
    assert provenance.startswith("refreshed on 20") and "tag 1, " in provenance, provenance
    assert f"/manifests/1 named {good} (was {first.removeprefix('sha256:')})" in provenance
    assert "container-contract, lemon validate --quick (" in provenance, provenance
    assert "field 1" in provenance and " 0 failed)" in provenance, provenance
    # edited in place: the comment and the layout stay, only the artifact's values change
    assert lock.read_text().count("\n") == shipped.count("\n")
    assert '"_comment": "test lock: the tag pins:1 in the local registry"' in lock.read_text()
    assert "1 proposed, 0 current, 0 refused" in (tmp_path / "pins.md").read_text()
    with_good = lock.read_text()

    # broken images: a label asking for a network the launch contract does not allow
    # (the launch is refused), and an engine that cannot start (not on the image's PATH)
    for labels, path, why in (
        ({"org.lemonade.network": "host"}, "/usr/local/bin:/usr/bin:/bin", "org.lemonade.network"),
        ({}, "/usr/bin:/bin", "did not become ready (container ended (exit code 1))"),
    ):
        broken = registry.push(rootfs, IMAGE, labels, path=path)
        refused = refresh_pins(tmp_path, registry, lock)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        [row] = json.loads(refused.stdout)
        assert row["state"] == "refused" and row["new_url"].endswith(f"@{broken}"), row
        assert "install check 'model loads' failed" in row["reason"], row
        assert why in row["reason"], row
        assert "the container-contract check did not run" in row["reason"], row
        assert lock.read_text() == with_good  # not proposed
        assert row["reason"] in (tmp_path / "pins.md").read_text()
        # the scratch cache is left clean: no refresh, no install, no image
        assert not (tmp_path / "scratch" / "refreshed-lock.json").exists()
        assert podman("images", "-q", f"{registry.host}/lemontest/{IMAGE}") == ""


def test_a_proposal_edits_the_shipped_lock_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the OCI plugin's own lock.json: only the proposed artifacts' lines change (a
    null sha256 too), the other pins, the comment and the layout stay."""
    loader = SourceFileLoader("refresh_pins", str(SCRIPT))  # a script: no .py suffix
    spec = spec_from_file_location(loader.name, SCRIPT, loader=loader)
    assert spec is not None
    script = module_from_spec(spec)
    monkeypatch.setitem(sys.modules, loader.name, script)  # for its dataclasses
    loader.exec_module(script)
    shipped = (TESTS.parent / "lemon_plugin_oci" / "lock.json").read_text()
    lock = tmp_path / "lock.json"
    lock.write_text(shipped)
    new = {
        "ds4:rocm": "docker://docker.io/kyuz0/strix-halo-ds4-toolbox:rocm-7.14@sha256:" + "b" * 64,
        "rocmfpx:rocm": "docker://docker.io/kyuz0/amd-strix-halo-toolboxes:rocm-7.14-rocmfpx"
        "@sha256:" + "c" * 64,
    }
    script.propose(
        lock,
        [
            script.Outcome(name, "linux-x86_64", "proposed", "", url, url[-64:], provenance=name)
            for name, url in new.items()
        ],
    )
    before, after = shipped.splitlines(), lock.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 5, changed  # ds4: url, sha256, provenance; rocmfpx: two lines
    data = json.loads(lock.read_text())
    for name, url in new.items():
        recipe, _, backend = name.partition(":")
        [artifact] = data["backends"][recipe][backend]["platforms"]["linux-x86_64"]
        assert artifact == {"url": url, "sha256": url[-64:], "provenance": name}
    expected = json.loads(shipped)
    for name in ("llamacpp", "halogen"):
        assert data["backends"][name] == expected["backends"][name]
    assert data["_comment"] == expected["_comment"]
