"""How an engine's process ended, in words a user can act on.

:func:`classify` turns a return code, the last lines of the engine's output and the
engine's own advice (``LaunchSpec.crash_advice``) into an :class:`EngineExit`: the signal
that killed it by name (``SIGILL (illegal instruction)``), what that usually means, the fix,
and whether starting the engine again can help. A negative return code ``-N`` is signal
``N`` (POSIX, as :mod:`asyncio` reports it); Windows' crash statuses
(``STATUS_ILLEGAL_INSTRUCTION``, ...) are read as the signal they correspond to. Pure
functions over plain data: no processes, standard library only (plugins import this).

:func:`start_failure` decides what a failed start calls for (:class:`StartFailure`): from
the exit, then the patterns the engine's plugin declares (``LaunchSpec.out_of_memory``,
``LaunchSpec.hopeless``) matched against its last lines; never from the core's guesses at
an engine's words (engines speak other languages: VTE's messages are Portuguese).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["EngineExit", "Meaning", "StartFailure", "classify", "signal_name", "start_failure"]


@dataclass(frozen=True)
class Meaning:
    """What dying of one signal usually means: ``words`` after its name, ``means`` (the
    core's explanation), ``fix`` (the generic fix, used when the engine gives none) and
    whether starting the engine again can help (``retryable``); ``memory``: the usual
    cause is a want of memory, so evicting other models may help."""

    words: str
    means: str
    fix: str
    retryable: bool = True
    memory: bool = False


#: The signals engines die of, explained. Others get the C library's description.
MEANINGS: Mapping[str, Meaning] = {
    "SIGILL": Meaning(
        "illegal instruction",
        "this engine uses CPU instructions this machine cannot run",
        "use a build of the engine made for this CPU (a portable build) or another backend "
        "('lemon backends' lists them); starting it again cannot help",
        retryable=False,
    ),
    "SIGSEGV": Meaning(
        "segmentation fault",
        "the engine crashed on a bad memory access (a bug in it, a "
        "damaged model file or a driver fault)",
        "check the model file (delete it and pull it again), update the backend, and report "
        "the last lines of its output to the engine's authors",
    ),
    "SIGKILL": Meaning(
        "killed: out of memory?",
        "something outside the engine killed it, most often the kernel's out-of-memory killer",
        "free memory (unload other models, or use a smaller model or ctx_size); 'journalctl "
        "-k' or 'dmesg' says whether the out-of-memory killer chose it",
        memory=True,
    ),
    "SIGABRT": Meaning(
        "aborted",
        "the engine stopped itself on a failed check or an error it could not handle",
        "its last lines of output say which",
    ),
    "SIGBUS": Meaning(
        "bus error",
        "the engine touched memory that could not be read, often a model file "
        "that was truncated or replaced while in use, or a full disk",
        "check that the model file is whole (delete it and pull it again) and that the disk "
        "has room",
    ),
    "SIGFPE": Meaning(
        "arithmetic error",
        "the engine hit an arithmetic fault (a division by zero: a bug "
        "in it, or options it does not handle)",
        "try other load options, and report the last lines of its output to the engine's authors",
    ),
}

#: Windows' crash statuses (``NTSTATUS``, the process's exit code) and the signal each
#: corresponds to, for the explanation and the engine's advice.
WINDOWS_STATUSES: Mapping[int, tuple[str, str]] = {
    0xC000001D: ("STATUS_ILLEGAL_INSTRUCTION", "SIGILL"),
    0xC0000005: ("STATUS_ACCESS_VIOLATION", "SIGSEGV"),
    0xC00000FD: ("STATUS_STACK_OVERFLOW", "SIGSEGV"),
    0xC0000094: ("STATUS_INTEGER_DIVIDE_BY_ZERO", "SIGFPE"),
}


@dataclass(frozen=True)
class EngineExit:
    """How an engine's process ended. ``signal`` is the name of the signal it died of
    (``"SIGILL"``; for a Windows crash status, the corresponding signal), ``None`` for an
    ordinary exit code. ``summary`` says how it ended (``died of SIGILL (illegal
    instruction)``, ``exited with code 1``); ``explanation`` what that means and the fix
    (``""`` for an exit code: the engine's output says why). ``retryable`` is false when
    starting the engine again cannot help, not even after freeing memory."""

    returncode: int | None  # as the process reported it (None: unknown)
    signal: str | None  # "SIGILL"; None for an ordinary exit code
    summary: str  # "died of SIGILL (illegal instruction)", "exited with code 1"
    explanation: str = ""  # what it means, then the fix (the engine's, else the core's)
    retryable: bool = True  # False: starting it again cannot help
    last_lines: tuple[str, ...] = ()  # the engine's last lines of output

    @property
    def headline(self) -> str:
        """``summary`` and, when there is one, ``explanation``: one line."""
        return f"{self.summary}: {self.explanation}" if self.explanation else self.summary

    def sentence(self, subject: str, when: str = "") -> str:
        """One line naming what ended and when: ``sentence("m: backend", "while
        starting")`` is ``m: backend died of SIGILL (illegal instruction) while starting:
        this engine uses CPU instructions this machine cannot run. <fix>``."""
        ended = " ".join(part for part in (subject, self.summary, when) if part)
        return f"{ended}: {self.explanation}" if self.explanation else f"{ended}."

    def output(self, lines: int | None = None) -> str:
        """``"\\nLast output:\\n"`` and the last ``lines`` lines (all kept: ``None``); ``""``
        when the engine printed nothing."""
        kept = self.last_lines if lines is None else self.last_lines[-lines:]
        return "\nLast output:\n" + "\n".join(kept) if kept else ""

    def report(self, subject: str, when: str = "", lines: int | None = None) -> str:
        """:meth:`sentence`, then :meth:`output`: what an error message says."""
        return self.sentence(subject, when) + self.output(lines)


def signal_name(returncode: int | None) -> str | None:
    """The name of the signal ``returncode`` reports: ``-4`` is ``"SIGILL"`` (a signal
    without a name is ``"signal N"``), a Windows crash status the signal it corresponds
    to; ``None`` for an ordinary exit code (or none)."""
    if returncode is None:
        return None
    if (status := WINDOWS_STATUSES.get(returncode & 0xFFFFFFFF)) is not None:
        return status[1]
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def classify(
    returncode: int | None, last_lines: Iterable[str] = (), advice: Mapping[str, str] | None = None
) -> EngineExit:
    """How an engine that ended with ``returncode`` ended. A signal is named, with the
    core's explanation and then ``advice[name]`` (the engine's fix, from
    ``LaunchSpec.crash_advice``), or the core's generic fix when the engine gives none.
    An ordinary exit code is only stated: the engine's own output says why."""
    lines = tuple(last_lines)
    name = signal_name(returncode)
    if name is None:
        summary = "ended" if returncode is None else f"exited with code {returncode}"
        return EngineExit(returncode, None, summary, last_lines=lines)
    assert returncode is not None  # a signal was read from it
    meaning = MEANINGS.get(name)
    words = meaning.words if meaning else _described(-returncode)
    status = returncode & 0xFFFFFFFF
    if status in WINDOWS_STATUSES:  # its own name, and the code users search for
        summary = f"died of {WINDOWS_STATUSES[status][0]} (0x{status:08X}: {words})"
    else:
        summary = f"died of {name} ({words})" if words else f"died of {name}"
    fix = (advice or {}).get(name) or (meaning.fix if meaning else "")
    means = meaning.means if meaning else ""
    explanation = f"{means}. {_capital(fix)}" if means and fix else means or _capital(fix)
    explanation += "." if explanation and not explanation.endswith((".", "!", "?")) else ""
    return EngineExit(
        returncode, name, summary, explanation, meaning.retryable if meaning else True, lines
    )


class StartFailure(StrEnum):
    """What a failed start calls for. ``out_of_memory``: it wanted memory, so evicting
    other models and starting it once more may help. ``hopeless``: starting it again
    cannot help (wrong input, an engine refusing this host): nothing is evicted, it is not
    retried, and the model is held off at once. ``unknown``: neither is known; nothing is
    evicted, and repeated failures are held off as a crash loop."""

    OUT_OF_MEMORY = "out_of_memory"
    HOPELESS = "hopeless"
    UNKNOWN = "unknown"


def start_failure(
    exit: EngineExit | None,
    lines: Iterable[str] = (),
    out_of_memory: Iterable[str] = (),
    hopeless: Iterable[str] = (),
) -> StartFailure:
    """What a start that failed with ``exit`` (``None``: it did not end, a timeout) and
    last output ``lines`` calls for. In order: an exit that says retrying cannot help
    (``SIGILL``), then a line matching one of the engine's ``hopeless`` regular
    expressions, make it ``hopeless``; a line matching one of its ``out_of_memory``
    expressions, then a signal that usually means a want of memory (``SIGKILL``: the
    out-of-memory killer), make it ``out_of_memory``; anything else is ``unknown``.
    Expressions are searched for in each line (:func:`re.search`)."""
    meaning = MEANINGS.get(exit.signal or "") if exit is not None else None
    if exit is not None and not exit.retryable:
        return StartFailure.HOPELESS
    kept = tuple(lines)

    def said(patterns: Iterable[str]) -> bool:
        return any(re.search(p, line) for p in patterns for line in kept)

    if said(hopeless):
        return StartFailure.HOPELESS
    if said(out_of_memory) or (meaning is not None and meaning.memory):
        return StartFailure.OUT_OF_MEMORY
    return StartFailure.UNKNOWN


def _described(number: int) -> str:
    """The C library's description of signal ``number``, lower case; ``""`` if none."""
    try:
        return (signal.strsignal(number) or "").lower()
    except ValueError:
        return ""


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
