"""What every ROCm engine stand-in checks before it starts, as the real ones fail.

Runs inside the test image under the image's own python3. Each check cites its source.
"""

from __future__ import annotations

import os
import sys


def fail(message: str, code: int = 1) -> None:
    print(message, file=sys.stderr, flush=True)
    sys.exit(code)


def require_rocm_device() -> None:
    # ROCm opens /dev/kfd first (libhsakmt hsaKmtOpenKFD); without it HIP reports
    # hipErrorNoDevice and the engines exit before loading anything.
    if not os.path.exists("/dev/kfd"):
        fail("hipErrorNoDevice: no ROCm-capable device is detected (/dev/kfd missing)")
    if not any(name.startswith("renderD") for name in os.listdir("/dev/dri")):
        fail("hipErrorNoDevice: no render node under /dev/dri")


def require_host_ipc() -> None:
    # Seed 002 and Cockpit (backends/ds4 server_runner.py: --ipc=host "to prevent HSA
    # memory-mapping errors"): ROCm's HSA runtime in a container with a private IPC
    # namespace dies about two seconds after start. The test bakes the host's IPC
    # namespace into the image, so this compares namespaces, not flags.
    with open("/etc/lemontest/host-ipc") as f:
        host = f.read().strip()
    if os.readlink("/proc/self/ns/ipc") != host:
        import time

        time.sleep(1.5)
        fail(
            "HSA_STATUS_ERROR_OUT_OF_RESOURCES: hsa_init failed to map the shared "
            "signal pool (IPC namespace is not the host's; run with --ipc=host)",
            134,
        )


def llama_server(*args: str) -> None:
    """The real engine work: llama.cpp's server on the same model."""
    os.execv("/usr/local/bin/llama-server", ["llama-server", *args])
