"""How ``lemon``'s command line is read: ``lemon run`` takes its options anywhere after
the model, as Ollama's does; an unknown option is still argparse's error (exit 2)."""

from __future__ import annotations

import argparse

import pytest

from lemoncore.cli import chat, main


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[argparse.Namespace]:
    """The arguments ``lemon run`` was called with (the parser is built per call)."""
    calls: list[argparse.Namespace] = []

    def cmd_run(args: argparse.Namespace) -> int:
        calls.append(args)
        return 0

    monkeypatch.setattr(chat, "cmd_run", cmd_run)
    return calls


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "smollm2", "--max-tokens", "30", "Say", "hi"],
        ["run", "smollm2", "Say", "--max-tokens", "30", "hi"],
        ["run", "--max-tokens", "30", "smollm2", "Say", "hi"],
    ],
)
def test_run_options_may_follow_the_model(argv: list[str], ran: list[argparse.Namespace]) -> None:
    assert main(argv) == 0
    assert (ran[0].model, ran[0].prompt, ran[0].max_tokens) == ("smollm2", ["Say", "hi"], 30)


def test_unknown_words_are_still_refused(
    ran: list[argparse.Namespace], capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["run", "m", "hi", "--no-such-flag"], ["ps", "stray"]):
        with pytest.raises(SystemExit) as refused:
            main(argv)
        assert refused.value.code == 2
        assert "unrecognized arguments" in capsys.readouterr().err
    assert ran == []
