"""What a ``lemon run`` chat keeps between answers, and its slash commands.

A :class:`Session` holds the model, the conversation, an optional system message and the
sampling parameters ``/set`` gave (sent with every answer). :meth:`Session.command`
carries out one slash command: ``/set NAME VALUE`` (Ollama's ``/set parameter NAME
VALUE`` too), ``/show``, ``/clear``, ``/?`` or ``/help``, and, as Ollama's chat does,
refuses any other word that starts with ``/`` rather than sending it; what it says goes
to stderr, so stdout holds only the answers.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Literal, NotRequired, TypedDict


class Message(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


class StreamOptions(TypedDict):
    include_usage: bool


class ChatBody(TypedDict):
    """The streamed ``/v1/chat/completions`` request ``lemon run`` sends."""

    model: str
    messages: list[Message]
    stream: bool
    stream_options: StreamOptions
    max_tokens: NotRequired[int]
    temperature: NotRequired[float]
    top_p: NotRequired[float]


@dataclass(frozen=True)
class Parameter:
    """A number ``/set`` takes: the request field it sets, its kind, its bounds."""

    request_field: Literal["max_tokens", "temperature", "top_p"]
    whole: bool  # a whole number (else any number)
    minimum: float
    maximum: float = math.inf

    def parse(self, text: str) -> int | float:
        """``text`` as this parameter's value; ``ValueError`` saying what it takes."""
        try:
            value: int | float = int(text) if self.whole else float(text)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and self.minimum <= value <= self.maximum:
            return value
        kind = "a whole number" if self.whole else "a number"
        bounds = (
            f"of {self.minimum:g} or more"
            if math.isinf(self.maximum)
            else f"from {self.minimum:g} to {self.maximum:g}"
        )
        raise ValueError(f"{kind} {bounds}, not {text!r}")


PARAMETERS = {
    "temperature": Parameter("temperature", whole=False, minimum=0),
    "top_p": Parameter("top_p", whole=False, minimum=0, maximum=1),
    "max_tokens": Parameter("max_tokens", whole=True, minimum=1),
    "num_predict": Parameter("max_tokens", whole=True, minimum=1),  # Ollama's name
}
KNOWN = ", ".join([*PARAMETERS, "system"])
HELP = (
    'Type a message; """ starts and ends a multi-line one. /? lists the commands, /bye '
    "leaves. Ctrl-C stops an answer."
)
COMMANDS = f"""\
/set temperature 0.2   a parameter for the answers to come (known: {KNOWN})
/set system TEXT       a system message for the conversation
/show                  the model and the parameters set
/clear                 forget the conversation
/bye                   leave (or Ctrl-D)
/? or /help            this list
\"\"\"                    starts and ends a multi-line message; Ctrl-C stops an answer"""


def say(text: str) -> None:
    print(text, file=sys.stderr)


@dataclass
class Session:
    """A chat with ``model``: the conversation, ``system`` and the fields ``/set`` gave."""

    model: str
    fields: dict[str, int | float] = field(default_factory=dict)
    system: str | None = None
    history: list[Message] = field(default_factory=list)

    def body(self, messages: list[Message]) -> ChatBody:
        """The streamed request for ``messages``, with the system message and ``fields``."""
        system: list[Message] = [{"role": "system", "content": self.system}] if self.system else []
        body: ChatBody = {
            "model": self.model,
            "messages": [*system, *messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        body.update(self.fields)  # type: ignore[typeddict-item]
        return body

    def command(self, line: str) -> bool:
        """Carry out ``line`` if it is a slash command (saying what it did); whether it
        was one."""
        name, _, rest = line.strip().partition(" ")
        match name:
            case "/set":
                self._set(rest)
            case "/show":
                self._show()
            case "/clear":
                self.history.clear()
                say("(conversation cleared)")
            case "/?" | "/help":
                say(COMMANDS)
            case _ if name.startswith("/"):  # as Ollama's: a typo is not sent as a message
                say(f"unknown command {name!r}; /? lists the commands")
            case _:
                return False
        return True

    def _set(self, text: str) -> None:
        # Ollama's spelling too: /set parameter NAME VALUE
        name, _, value = text.strip().removeprefix("parameter ").strip().partition(" ")
        value = value.strip()
        if not value:
            say(f"usage: /set NAME VALUE, a NAME of: {KNOWN} (e.g. /set temperature 0.2)")
            return
        if name == "system":
            self.system = value
            say("(system message set)")
            return
        parameter = PARAMETERS.get(name)
        if parameter is None:
            say(f"unknown parameter {name!r}; known: {KNOWN} (e.g. /set temperature 0.2)")
            return
        try:
            self.fields[parameter.request_field] = parameter.parse(value)
        except ValueError as exc:
            say(f"{name} takes {exc}")
            return
        say(f"({name} {value})")

    def _show(self) -> None:
        say(f"model {self.model}")
        for name, value in self.fields.items():
            say(f"{name} {value}")
        if self.system:
            say(f"system {self.system}")
        if not self.fields and not self.system:
            say("no parameters set: the engine's defaults (/set temperature 0.2 sets one)")
