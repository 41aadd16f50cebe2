"""A chat-only test backend: the ``echo`` recipe, whose engine is lemoncore's placeholder
(:mod:`lemoncore.echo_engine`), which serves chat and completions only. Its backend
declares no other endpoint, so lemoncore translates Anthropic's Messages and OpenAI's
Responses to chat for it: the path llama.cpp's models take too, on another engine.

Run as a script (``echoplugin.py --port N``) it serves that app the way ``lemon serve``
does (settings from ``LEMON_*``), with no installed plugin loaded:
``running_server(dir, command=(str(SCRIPT),))``. The model, ``echo-words``, answers with
the words of :data:`WORDS` in order (a token is a word): the whole text when
``max_tokens`` allows, else its first ``max_tokens`` words.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lemoncore import Settings, hookimpl
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.recipes import Backend, DeviceKind, Format, ModelInfo, Recipe, SupportRow

SCRIPT = Path(__file__)
MODEL = "echo-words"
WORDS = (
    "Hello there, I am a small echo engine that answers with these words in order, "
    "one word a token, and then stops."
)


def chat_only_recipe(name: str, display_name: str) -> Recipe:
    """A recipe whose one backend (``cpu``) declares no endpoint but the defaults (chat,
    completions, embeddings), so lemoncore translates Messages and Responses for it."""
    return Recipe(
        name=name,
        display_name=display_name,
        backends=(
            Backend(
                name="cpu",
                format=Format.PYTHON,
                description="chat only",
                support=(
                    SupportRow(
                        os=frozenset({"linux", "windows", "darwin"}),
                        devices={DeviceKind.CPU: frozenset()},
                    ),
                ),
            ),
        ),
    )


def echo_launch(model: ModelInfo, context: LaunchContext, *extra: str) -> LaunchSpec:
    """lemoncore's echo engine serving ``model`` (``extra``: more of its flags)."""
    return LaunchSpec(
        argv=(
            sys.executable,
            "-m",
            "lemoncore.echo_engine",
            "--model",
            str(context.model_path),
            "--alias",
            model.name,
            "--host",
            context.host,
            "--port",
            str(context.port),
            *extra,
        ),
        env={"ECHO_ENGINE_API_KEY": context.backend_key},
        health_path="/health",
    )


RECIPE = chat_only_recipe("echo", "Echo engine (tests)")


class EchoPlugin:
    """The ``echo`` recipe and its one model, whose "weights" are :data:`WORDS`."""

    def __init__(self, words: Path) -> None:
        self.words = words

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        return [RECIPE]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [ModelInfo(name=MODEL, recipe="echo", checkpoint=f"file:{self.words}")]

    @hookimpl
    def install(self) -> InstallPlan:
        return InstallPlan("1", location=SCRIPT.parent)

    @hookimpl
    def launch(self, model: ModelInfo, context: LaunchContext) -> LaunchSpec:
        return echo_launch(model, context)


def echo_plugin(cache_dir: Path) -> EchoPlugin:
    """The plugin, its model's words in ``cache_dir``."""
    words = cache_dir / "models" / "echo-words.txt"
    words.parent.mkdir(parents=True, exist_ok=True)
    words.write_text(WORDS, encoding="utf-8")
    return EchoPlugin(words)


if __name__ == "__main__":
    from lemoncore import create_app
    from lemoncore.cli import serve_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    settings = Settings(port=args.port, plugins_allow="")
    serve_app(create_app(settings, plugins={"echo": echo_plugin(settings.cache_dir)}))
