"""A speech-only test backend: the ``speech`` recipe, whose one backend declares only
``/v1/audio/speech`` (registered by this plugin, with its body and an example), served by
``speech_engine.py`` with the real ``espeak-ng``; its model ``speech-en`` (label
``speech``) is a file naming espeak-ng's voice. The backend declares a bounded request
option, ``speed`` (espeak-ng's ``-s`` words per minute, 80 to 450).

Run as a script (``speechplugin.py --port N``) it serves that app the way ``lemon serve``
does (settings from ``LEMON_*``), with no installed plugin loaded:
``running_server(dir, command=(str(SCRIPT),))``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from lemoncore import Settings, hookimpl
from lemoncore.launch import InstallPlan, LaunchContext, LaunchSpec
from lemoncore.recipes import (
    Backend,
    DeviceKind,
    Endpoint,
    Format,
    ModelInfo,
    ModelType,
    OptionSpec,
    Recipe,
    SupportRow,
)

SCRIPT = Path(__file__)
ENGINE = SCRIPT.with_name("speech_engine.py")
MODEL = "speech-en"
SPEECH = "/v1/audio/speech"
ESPEAK = shutil.which("espeak-ng")


class SpeechRequest(BaseModel):
    """OpenAI's speech body, as far as this engine reads it."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"input": "Hello from the kit.", "voice": "en"}]}
    )
    input: str
    voice: str = "en"


RECIPE = Recipe(
    name="speech",
    display_name="Speech (tests)",
    backends=(
        Backend(
            name="cpu",
            format=Format.PYTHON,
            description="espeak-ng text to speech",
            endpoints=frozenset({SPEECH}),
            options=(OptionSpec(name="speed", type="int", default=175, minimum=80, maximum=450),),
            support=(
                SupportRow(
                    os=frozenset({"linux", "darwin"}), devices={DeviceKind.CPU: frozenset()}
                ),
            ),
        ),
    ),
)


class SpeechPlugin:
    """The ``speech`` recipe, its endpoint and its one model."""

    def __init__(self, voice: Path) -> None:
        self.voice = voice

    @hookimpl
    def register_recipes(self) -> Sequence[Recipe]:
        return [RECIPE]

    @hookimpl
    def register_endpoints(self) -> Sequence[Endpoint]:
        return [
            Endpoint(
                path=SPEECH,
                summary="Text to speech",
                model_type=ModelType.SPEECH,
                required="input",
                streams=False,
                media_type="audio/wav",
                request=SpeechRequest,
            )
        ]

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [
            ModelInfo(
                name=MODEL, recipe="speech", checkpoint=f"file:{self.voice}", labels=("speech",)
            )
        ]

    @hookimpl
    def install(self) -> InstallPlan:
        return InstallPlan("1", location=SCRIPT.parent)

    @hookimpl
    def launch(self, model: ModelInfo, context: LaunchContext) -> LaunchSpec:
        return LaunchSpec(
            argv=(
                sys.executable,
                str(ENGINE),
                "--voice-file",
                str(context.model_path),
                "--host",
                context.host,
                "--port",
                str(context.port),
                "--speed",
                str(context.options["speed"]),
            ),
            health_path="/health",
        )


def speech_plugin(cache_dir: Path) -> SpeechPlugin:
    """The plugin, its model's voice file in ``cache_dir``."""
    voice = cache_dir / "models" / "speech-en.voice"
    voice.parent.mkdir(parents=True, exist_ok=True)
    voice.write_text("en", encoding="utf-8")
    return SpeechPlugin(voice)


if __name__ == "__main__":
    from lemoncore import create_app
    from lemoncore.cli import serve_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    settings = Settings(port=args.port, plugins_allow="")
    serve_app(create_app(settings, plugins={"speech": speech_plugin(settings.cache_dir)}))
