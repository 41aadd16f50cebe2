"""The body of ``POST /v1/audio/speech`` as the openai SDK sends it
(``openai/resources/audio/speech.py`` ``Speech.create``; the fields and their limits are
``openai/types/audio/speech_create_params.py``'s ``SpeechCreateParams``).

One model serves two checks: lemoncore validates each request with it
(``Endpoint.request``: a 400 naming the field, before any model is loaded) and shows it
in ``/openapi.json``; the engine validates with it again, for clients that reach it
directly. ``model`` is lemoncore's own field, so it is not declared; other fields are
allowed and ignored. Pydantic only: the engine imports it without lemoncore.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_INPUT = 4096  # OpenAI: "The maximum length is 4096 characters."
FORMATS = ("wav", "pcm")  # what espeak-ng writes; mp3, opus, aac and flac need an encoder


class VoiceID(BaseModel):
    """OpenAI's custom voice reference; here its ``id`` is read as a voice name."""

    model_config = ConfigDict(extra="allow")

    id: str


class SpeechRequest(BaseModel):
    """OpenAI's text-to-speech request, as far as espeak-ng can serve it; its example is
    the sample request the kit and ``lemon validate`` send."""

    model_config = ConfigDict(
        extra="allow", json_schema_extra={"examples": [{"input": "Hello.", "voice": "alloy"}]}
    )

    input: str = Field(
        min_length=1, max_length=MAX_INPUT, description="The text to speak (1-4096 characters)"
    )
    voice: str | VoiceID = Field(
        description="An OpenAI voice name (alloy, ash, ballad, coral, echo, fable, onyx, "
        "nova, sage, shimmer, verse, marin, cedar), which the model's voice file maps to an "
        "espeak-ng voice, or an espeak-ng voice as `espeak-ng --voices` lists it (en-us, "
        "fr-fr, ...), optionally with a variant (en-us+f3)"
    )
    response_format: Literal["wav", "pcm"] = Field(
        "wav",
        description="wav (the default here; OpenAI's is mp3), or pcm: the WAV's samples, "
        "16-bit signed little-endian mono at espeak-ng's rate. mp3, opus, aac and flac "
        "are refused: espeak-ng does not produce them",
    )
    speed: float = Field(
        1.0,
        ge=0.25,
        le=4.0,
        description="0.25-4.0, times the model's words per minute (espeak-ng -s, "
        "kept within 80-450)",
    )
    instructions: str | None = Field(
        None, description="Accepted and ignored: espeak-ng takes no instructions"
    )
    stream_format: Literal["audio"] | None = Field(
        None, description="audio only: the answer is the whole file (no SSE events)"
    )
