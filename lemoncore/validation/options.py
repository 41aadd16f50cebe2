"""What ``lemon validate`` is asked to do (:class:`Options`), what it runs with
(:class:`Run`: settings, the server command, in-process plugins, how to ask, report
progress and speak) and :class:`Refused`, when it cannot start."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lemoncore.errors import LemonError
from lemoncore.hosts import HostInfo
from lemoncore.settings import Settings
from lemoncore.validation.server import SERVE

Ask = Callable[[str], bool]
Progress = Callable[[str], Callable[[int, int], None]]


class Refused(LemonError):
    """Validation cannot start; the message says why and what to do."""


@dataclass
class Options:
    backend: str  # recipe:backend
    model: str | None = None
    quick: bool = False
    yes: bool = False  # consent to installs and downloads without asking


@dataclass
class Run:
    """What the I/O needs besides the options (tests and embedders replace them)."""

    settings: Settings = field(default_factory=Settings)
    command: tuple[str, ...] = SERVE
    plugins: Mapping[str, object] | None = None  # in-process plugins, as the server has
    ask: Ask = lambda question: False
    progress: Progress | None = None
    say: Callable[[str], None] = lambda text: None
    host: HostInfo | None = None  # this machine (default: detected)
