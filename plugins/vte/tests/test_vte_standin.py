"""The stand-in ``vte-server`` follows VTE 0.3.7 where the other tests lean on it: the HIP
DLL it loads (``vte/bridge/dll_discovery.py`` ``find_hip_dll``) and the answers Starlette
and VTE's handlers give outside the happy path (``vte/server/http_server.py``). Run as its
own process, as lemoncore runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from lemoncore.plugin import free_port

STANDIN = Path(__file__).with_name("vte_server_standin.py")


def run(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """The stand-in with ``env`` (and the report file) over a clean environment."""
    base = {k: os.environ[k] for k in ("PATH", "PYTHONPATH", "SYSTEMROOT") if k in os.environ}
    env = {
        **base,
        "PATH": "",  # Windows' PATH, as VTE splits it (";"); this test's own is not searched
        "VTE_STANDIN_HIP_DEVICES": json.dumps(["AMD Radeon RX 7600"]),
        "VTE_STANDIN_REPORT": str(tmp_path / "report.jsonl"),
        **env,
    }
    command = [sys.executable, str(STANDIN), *args]
    return subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE)


def dll(root: Path, folder: str, name: str) -> Path:
    path = root / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"MZ")
    return path


@pytest.mark.parametrize(
    ("files", "hip_path", "path", "loaded"),
    [
        # the unversioned name first, in a folder that has both
        (["sdk/bin/amdhip64_7.dll", "sdk/bin/amdhip64.dll"], "sdk", "", "sdk/bin/amdhip64.dll"),
        # HIP_PATH before C:\Program Files\AMD\HIP
        (
            ["C/Program Files/AMD/HIP/bin/amdhip64_6.dll", "sdk/bin/amdhip64_7.dll"],
            "sdk",
            "",
            "sdk/bin/amdhip64_7.dll",
        ),
        # C:\Program Files\AMD\HIP before PATH
        (
            ["C/Program Files/AMD/HIP/bin/amdhip64_6.dll", "onpath/amdhip64_7.dll"],
            "",
            "onpath",
            "C/Program Files/AMD/HIP/bin/amdhip64_6.dll",
        ),
        # C:\Program Files\AMD\ROCm\<version>, newest first, before PATH
        (
            [
                "C/Program Files/AMD/ROCm/6.4/bin/amdhip64_6.dll",
                "C/Program Files/AMD/ROCm/7.1/bin/amdhip64_7.dll",
                "onpath/amdhip64_7.dll",
            ],
            "",
            "onpath",
            "C/Program Files/AMD/ROCm/7.1/bin/amdhip64_7.dll",
        ),
        # the newest versioned name when there is no unversioned one
        (["onpath/amdhip64_6.dll", "onpath/amdhip64_7.dll"], "", "onpath", "onpath/amdhip64_7.dll"),
    ],
)
def test_the_hip_dll_vte_loads(
    tmp_path: Path, files: list[str], hip_path: str, path: str, loaded: str
) -> None:
    for file in files:
        dll(tmp_path, *file.rsplit("/", 1))
    env = {"VTE_STANDIN_SYSTEM_DRIVE": str(tmp_path / "C")}
    env |= {"HIP_PATH": str(tmp_path / hip_path)} if hip_path else {}
    env |= {"PATH": f"{tmp_path / path};"} if path else {}
    process = run(tmp_path, env, "--gguf-path", "absent.gguf", "--port", "1")
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 1  # no model file: the load fails after the DLL is loaded
    text = out.decode("cp1252")  # the stand-in writes as VTE's release does
    assert f"amdhip64.dll carregada de {tmp_path / loaded}" in text
    assert "Arquivo GGUF não encontrado: absent.gguf" in text


def test_no_hip_dll_is_vtes_two_line_refusal(tmp_path: Path) -> None:
    process = run(tmp_path, {}, "--gguf-path", "absent.gguf", "--port", "1")
    out, _ = process.communicate(timeout=30)
    lines = out.decode("cp1252").splitlines()
    assert process.returncode == 1
    assert lines[-2].endswith(
        "Falha ao carregar o modelo, encerrando: amdhip64.dll não encontrada. Instale o AMD "
        "HIP SDK:"
    )
    assert lines[-1] == "https://www.amd.com/en/developer/resources/rocm-hub/hip-sdk.html"


@contextmanager
def serving(tmp_path: Path) -> Iterator[httpx.Client]:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(64))
    dll(tmp_path, "sdk/bin", "amdhip64_7.dll")
    port = free_port()
    env = {"HIP_PATH": str(tmp_path / "sdk")}
    process = run(tmp_path, env, "--gguf-path", str(model), "--port", str(port))
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 30
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.01)  # not listening yet: it binds after loading
            assert process.poll() is None, "the stand-in ended instead of serving"
            yield client
    finally:
        process.kill()
        process.communicate(timeout=10)


def test_answers_outside_the_happy_path_are_vtes(tmp_path: Path) -> None:
    with serving(tmp_path) as client:
        missing = client.get("/v1/embeddings")  # Starlette's Router.not_found: plain text
        assert (missing.status_code, missing.text) == (404, "Not Found")
        assert missing.headers["content-type"].startswith("text/plain")
        wrong = client.get("/v1/chat/completions")  # Route.handle: wrong method
        assert (wrong.status_code, wrong.text) == (405, "Method Not Allowed")
        empty = client.post("/v1/completions", json={"prompt": ""})  # completions: not prompt
        assert empty.status_code == 400
        assert empty.json()["error"] == {
            "message": "Campo 'prompt' ausente.",
            "type": "invalid_request_error",
        }
        none = client.post("/v1/chat/completions", json={"messages": []})  # _extract_prompt
        assert none.json()["error"]["message"] == "Campo 'messages' ausente ou vazio na requisição."
        listed = client.post("/v1/chat/completions", json=[])  # body.get fails: the 500 handler
        assert (listed.status_code, listed.json()["error"]["message"]) == (
            500,
            "Erro interno do servidor.",
        )
