"""Running Debian's ``espeak-ng`` program: its voices, one synthesis, and its WAV.

The flags used, as ``espeak-ng --help`` and ``man espeak-ng`` (1.51) describe them:
``--stdout`` (write speech output to stdout), ``--stdin`` (read text input from stdin
at once till the end of the stream: the text never becomes an argument, so a text
starting with ``-`` is not an option), ``-v <voice name>`` (a voice file from
espeak-ng-data/voices; "a variant can be specified using voice+variant, such as
af+m3"), ``-s <integer>`` (speed in words per minute, default 175; speak_lib.h's
``espeakRATE``: "Values 80 to 450"), ``--voices[=<language>]`` (list the voices, or
those of a subdirectory such as ``variant``).

On a pipe espeak-ng cannot seek back, so the RIFF and data sizes of the WAV it writes
are placeholders (0x7ffff000 here): :func:`wav` reads the samples and writes a WAV whose
header is true.
"""

from __future__ import annotations

import io
import subprocess
import threading
import wave
from dataclasses import dataclass
from pathlib import Path

MIN_WPM, MAX_WPM = 80, 450  # speak_lib.h, espeakRATE
MAX_AUDIO_BYTES = 64 * 2**20  # 4096 characters at 80 wpm are about 25 MiB at 22050 Hz


class SynthesisError(Exception):
    """espeak-ng failed: the message says how, with the last line it wrote to stderr."""


@dataclass(frozen=True)
class Voices:
    """What ``-v`` accepts here: languages (of voices that need no MBROLA, which
    ``espeak-ng --voices`` lists but Debian's espeak-ng cannot run alone) and variants."""

    languages: frozenset[str]
    variants: frozenset[str]

    def accepts(self, name: str) -> bool:
        """``LANGUAGE`` or ``LANGUAGE+VARIANT``, both as listed."""
        language, plus, variant = name.partition("+")
        return language in self.languages and (not plus or variant in self.variants)


def _listed(program: Path, *argv: str) -> list[list[str]]:
    """The rows of a ``--voices`` listing, split on whitespace, without its header."""
    out = subprocess.run(
        [str(program), *argv], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return [line.split() for line in out.splitlines()[1:] if line.strip()]


def list_voices(program: Path) -> Voices:
    """The voices ``program`` has (``--voices`` and ``--voices=variant``): columns Pty,
    Language, Age/Gender, VoiceName, File."""
    rows = _listed(program, "--voices")
    languages = frozenset(r[1] for r in rows if len(r) >= 5 and not r[4].startswith("mb/"))
    variants = frozenset(
        r[4].rpartition("/")[2] for r in _listed(program, "--voices=variant") if len(r) >= 5
    )
    return Voices(languages, variants)


def version(program: Path) -> str:
    """``1.51`` from ``espeak-ng --version``'s ``eSpeak NG text-to-speech: 1.51  Data
    at: ...``; ``""`` when it says otherwise."""
    out = subprocess.run(
        [str(program), "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    head = out.partition(":")[2].split()
    return head[0] if head else ""


def _last_line(err: bytes) -> str:
    lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(nothing on stderr)"


def synthesize(
    program: Path, voice: str, wpm: int, text: str, timeout: float, limit: int = MAX_AUDIO_BYTES
) -> bytes:
    """The WAV espeak-ng writes for ``text`` (its header's sizes unset); at most ``limit``
    bytes, within ``timeout`` seconds, else :class:`SynthesisError`."""
    argv = [str(program), "--stdout", "--stdin", "-v", voice, "-s", str(wpm)]
    # A fixed program and flags; the text goes on stdin, never into argv.
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin and proc.stdout and proc.stderr
    stderr, errors = proc.stderr, list[bytes]()
    reader = threading.Thread(target=lambda: errors.append(stderr.read()), daemon=True)
    reader.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        try:
            proc.stdin.write(text.encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it died first: its status and stderr say why
        out = bytearray()
        while chunk := proc.stdout.read(65536):
            out += chunk
            if len(out) > limit:
                proc.kill()
                raise SynthesisError(f"espeak-ng wrote more than {limit} bytes of audio")
        status = proc.wait()
    finally:
        timed_out = not timer.is_alive()
        timer.cancel()
        proc.kill()
        proc.wait()
        reader.join(5)
        proc.stdout.close()
        proc.stderr.close()
    said = _last_line(errors[0] if errors else b"")
    if timed_out and status != 0:
        raise SynthesisError(f"espeak-ng took longer than {timeout:g} s: {said}")
    if status != 0:
        raise SynthesisError(f"espeak-ng exited with status {status}: {said}")
    if len(out) <= 44:
        raise SynthesisError(f"espeak-ng wrote no audio: {said}")
    return bytes(out)


@dataclass(frozen=True)
class Audio:
    """Samples with their format, as the WAV espeak-ng wrote says."""

    frames: bytes
    channels: int
    sample_width: int  # bytes
    rate: int

    def wav(self) -> bytes:
        """A WAV with a true header."""
        out = io.BytesIO()
        with wave.open(out, "wb") as w:
            w.setnchannels(self.channels)
            w.setsampwidth(self.sample_width)
            w.setframerate(self.rate)
            w.writeframes(self.frames)
        return out.getvalue()


def read_wav(data: bytes) -> Audio:
    """The samples of espeak-ng's WAV, whatever its header's sizes say;
    :class:`SynthesisError` when it is not a WAV."""
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            frames = w.readframes(w.getnframes())  # fewer when the size is a placeholder
            return Audio(frames, w.getnchannels(), w.getsampwidth(), w.getframerate())
    except (wave.Error, EOFError) as exc:
        raise SynthesisError(f"espeak-ng's output is not a WAV file: {exc}") from None
