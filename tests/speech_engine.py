"""A real text-to-speech engine for core tests: OpenAI's ``POST /v1/audio/speech`` (a
JSON body with ``input``; ``voice`` ignored) answered with the WAV that Debian's
``espeak-ng`` writes for the text, and ``GET /health``.

    python speech_engine.py --voice-file FILE --port N [--speed WPM]

The "model" is a file naming an espeak-ng voice (``en``). The command line it runs is
``espeak-ng --stdout -v VOICE -s WPM TEXT`` (``espeak-ng --help``: ``--stdout`` "Write
speech output to stdout", ``-v <voice name>``, ``-s <integer>`` "Speed in approximate
words per minute"). A body without ``input`` is a 400 in OpenAI's error shape. Standard
library only (and :mod:`lemoncore.standin`).
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from lemoncore import standin

ESPEAK = "espeak-ng"


class Speech(standin.Handler):
    voice = "en"
    speed = 175

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_json(200, {"status": "ok"})
        else:
            self.send_json(404, standin.error(f"no route {self.path}"))

    def do_POST(self) -> None:
        if self.path != "/v1/audio/speech":
            self.send_json(404, standin.error(f"no route {self.path}"))
            return
        try:
            body = self.read_json()
        except ValueError:
            self.send_json(400, standin.error("the body is not JSON"))
            return
        text = body.get("input") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text:
            self.send_json(400, standin.error("input: a non-empty string is required"))
            return
        spoken = subprocess.run(
            [ESPEAK, "--stdout", "-v", self.voice, "-s", str(self.speed), "--", text],
            capture_output=True,
            check=False,
        )
        if spoken.returncode != 0:
            message = spoken.stderr.decode(errors="replace").strip()
            self.send_json(500, standin.error(f"espeak-ng: {message}", "server_error"))
            return
        self.send_bytes(200, spoken.stdout, "audio/wav")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--voice-file", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--speed", type=int, default=175)
    args = parser.parse_args()
    Speech.voice = args.voice_file.read_text(encoding="utf-8").strip()
    Speech.speed = args.speed
    standin.serve(Speech, args.port, args.host)


if __name__ == "__main__":
    main()
