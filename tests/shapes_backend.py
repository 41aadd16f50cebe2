"""The backend of the error-shape table (``test_error_shapes.py``): recipe ``shapes``, a
chat-only backend (``Backend.endpoints`` default, so ``/v1/messages`` is translated to
chat), with two models:

- ``shapes-echo``, lemoncore's echo engine (:mod:`lemoncore.echo_engine`), which refuses
  a prompt and ``max_tokens`` over its context (``--ctx-size``) with an OpenAI-shaped
  400: an engine's 4xx;
- ``shapes-wedged``, ``tinyserver.py --answer 500``, which answers every request with a
  500: an engine's 5xx.

Run as a script (``shapes_backend.py --port N``) it serves the app the way ``lemon serve``
does (settings from ``LEMON_*``), with the installed Ollama API plugin loaded and this one
in-process: ``running_server(dir, env, command=(str(SCRIPT),))``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lemoncore import Settings, hookimpl
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.recipes import ModelInfo, Recipe

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode adds no test dirs
from echoplugin import chat_only_recipe, echo_launch

SCRIPT = Path(__file__)
TINY = SCRIPT.with_name("tinyserver.py")
ECHO, WEDGED = "shapes-echo", "shapes-wedged"
CTX_SIZE = 256  # the echo engine's context, in words
RECIPE = chat_only_recipe("shapes", "Error shapes (tests)")


class ShapesPlugin:
    """The ``shapes`` recipe and its two models, whose "weights" are one text file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.words = root / "models" / "shapes-words.txt"
        self.words.parent.mkdir(parents=True, exist_ok=True)
        self.words.write_text("one two three four five six seven eight", encoding="utf-8")

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        return [RECIPE]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [
            ModelInfo(name=name, recipe="shapes", checkpoint=f"file:{self.words}")
            for name in (ECHO, WEDGED)
        ]

    @hookimpl
    def install(self) -> InstallPlan:
        return InstallPlan("1", location=SCRIPT.parent)

    @hookimpl
    def launch(self, model: ModelInfo, context: LaunchContext) -> LaunchSpec:
        if model.name == WEDGED:
            return LaunchSpec(
                argv=(
                    sys.executable,
                    str(TINY),
                    "--port",
                    str(context.port),
                    "--name",
                    WEDGED,
                    "--model",
                    str(context.model_path),
                    "--ctx-size",
                    str(CTX_SIZE),
                    "--registry",
                    str(self.root / "tiny-running"),
                    "--answer",
                    "500",
                )
            )
        return echo_launch(model, context, "--ctx-size", str(CTX_SIZE))


if __name__ == "__main__":
    from lemoncore import create_app
    from lemoncore.cli import serve_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    settings = Settings(port=args.port, plugins_allow="ollama-api")
    serve_app(create_app(settings, plugins={"shapes": ShapesPlugin(settings.cache_dir)}))
