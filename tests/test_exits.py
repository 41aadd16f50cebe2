"""How an engine ended, in words (``lemoncore.exits``), and what the start-failure
bookkeeping makes of it (``StartError``): tables over return codes, no processes."""

from __future__ import annotations

import signal

import pytest

from lemoncore.exits import StartFailure, classify, signal_name, start_failure
from lemoncore.launch import LaunchSpec
from lemoncore.serving.proxy import broken
from lemoncore.supervisor import StartError

SIGILL_ADVICE = "use the llamacpp:prebuilt backend, or rebuild it portably"


def number(name: str) -> int:
    """Signal ``name``'s number here (they differ between systems); skip where absent."""
    if not hasattr(signal, name):
        pytest.skip(f"no {name} on this system")
    return int(getattr(signal, name))


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("SIGILL", "illegal instruction"),
        ("SIGSEGV", "segmentation fault"),
        ("SIGKILL", "killed: out of memory?"),
        ("SIGABRT", "aborted"),
        ("SIGBUS", "bus error"),
        ("SIGFPE", "arithmetic error"),
    ],
)
def test_a_signal_is_named_with_what_it_means_and_a_fix(name: str, words: str) -> None:
    ended = classify(-number(name), ["loading", "boom"])
    assert ended.signal == name and signal_name(-number(name)) == name
    assert ended.summary == f"died of {name} ({words})"
    assert ended.explanation and ended.explanation.endswith(".")  # meaning, then the fix
    assert ended.headline == f"{ended.summary}: {ended.explanation}"
    assert ended.last_lines == ("loading", "boom")


def test_sigill_says_the_cpu_cannot_run_it_then_the_engines_advice() -> None:
    ended = classify(
        -number("SIGILL"),
        ["main: loading model"],
        {"SIGILL": SIGILL_ADVICE, "SIGSEGV": "not this one"},
    )
    assert not ended.retryable
    assert ended.explanation == (
        "this engine uses CPU instructions this machine cannot "
        f"run. {SIGILL_ADVICE[0].upper()}{SIGILL_ADVICE[1:]}."
    )
    assert ended.report("m: backend", "while starting") == (
        "m: backend died of SIGILL (illegal instruction) while starting: this engine uses CPU "
        f"instructions this machine cannot run. U{SIGILL_ADVICE[1:]}.\n"
        "Last output:\nmain: loading model"
    )
    generic = classify(-number("SIGILL")).explanation  # no advice: the core's own fix
    assert "cannot run" in generic and "another backend" in generic
    assert "starting it again cannot help" in generic


@pytest.mark.parametrize("code", [0, 1, 3, 127, 255])
def test_an_exit_code_is_stated_as_before(code: int) -> None:
    ended = classify(code, ["error: invalid argument: --bogus"], {"SIGILL": SIGILL_ADVICE})
    assert (ended.signal, ended.explanation, ended.retryable) == (None, "", True)
    assert signal_name(code) is None
    assert (
        ended.sentence("m: backend", "while starting")
        == f"m: backend exited with code {code} while starting."
    )
    assert classify(None).summary == "ended" and classify(None).signal is None


def test_only_sigill_says_a_new_start_cannot_help() -> None:
    retryable = {
        name: classify(-number(name)).retryable
        for name in ("SIGILL", "SIGSEGV", "SIGKILL", "SIGABRT", "SIGTERM")
    }
    assert retryable == {
        "SIGILL": False,
        "SIGSEGV": True,
        "SIGKILL": True,
        "SIGABRT": True,
        "SIGTERM": True,
    }


def test_a_signal_without_an_explanation_keeps_the_c_librarys_words() -> None:
    ended = classify(-number("SIGTERM"))
    words = (signal.strsignal(number("SIGTERM")) or "").lower()  # "terminated" on Linux
    assert ended.summary == (f"died of SIGTERM ({words})" if words else "died of SIGTERM")
    assert (
        ended.explanation == "" and ended.sentence("m: backend") == f"m: backend {ended.summary}."
    )
    assert (
        classify(-number("SIGTERM"), advice={"SIGTERM": "ask who stopped it"}).explanation
        == "Ask who stopped it."
    )


def test_windows_crash_statuses_read_as_their_signal() -> None:
    for code in (0xC000001D, 0xC000001D - 2**32):  # as a DWORD, and as a signed int
        ended = classify(code, advice={"SIGILL": SIGILL_ADVICE})
        assert ended.signal == "SIGILL" and not ended.retryable
        assert ended.summary == (
            "died of STATUS_ILLEGAL_INSTRUCTION (0xC000001D: illegal instruction)"
        )
        assert ended.explanation.endswith(f"{SIGILL_ADVICE[1:]}.")
    assert classify(0xC0000005).signal == "SIGSEGV"


def test_output_keeps_the_last_lines_asked_for() -> None:
    ended = classify(1, [f"line {n}" for n in range(20)])
    assert ended.output(2) == "\nLast output:\nline 18\nline 19"
    assert ended.output().count("\n") == 21
    assert classify(1).output() == ""


OOM = (r"failed to allocate \S+ buffer of size",)  # as an engine's plugin declares them
HOPELESS = (r"failed to open GGUF file", r"não pertence a essa família")
ALLOC = "ggml_backend_buft_alloc_buffer_n_default: failed to allocate CPU buffer of size 9"
FAMILY = (
    "VTE_TARGET_ARCH_FAMILY=gfx11, mas o único device HIP visível ('Radeon', arch "
    "gfx1201) não pertence a essa família."
)


@pytest.mark.parametrize(
    ("code", "lines", "patterns", "expected"),
    [
        # the exit alone: SIGILL never helps; SIGKILL is most often the OOM killer
        ("SIGILL", [ALLOC], True, StartFailure.HOPELESS),  # the exit beats the words
        ("SIGKILL", [], False, StartFailure.OUT_OF_MEMORY),
        ("SIGSEGV", [], False, StartFailure.UNKNOWN),
        (1, [], False, StartFailure.UNKNOWN),
        (None, [], False, StartFailure.UNKNOWN),  # a timeout: it did not end
        # the engine's declared words, in its own language
        (1, ["loading", ALLOC, "exiting"], True, StartFailure.OUT_OF_MEMORY),
        (
            1,
            [f"ERROR Falha ao carregar o modelo, encerrando: {FAMILY}"],
            True,
            StartFailure.HOPELESS,
        ),
        (
            1,
            ["gguf_init_from_file: failed to open GGUF file '/x' (No such file)"],
            True,
            StartFailure.HOPELESS,
        ),
        ("SIGKILL", [FAMILY], True, StartFailure.HOPELESS),  # hopeless beats a guess
        (1, [ALLOC, FAMILY], True, StartFailure.HOPELESS),
        # undeclared, English or not, the core reads nothing into it
        (1, [ALLOC], False, StartFailure.UNKNOWN),
        (
            1,
            ["error: invalid argument: --bogus (No such file or directory)"],
            True,
            StartFailure.UNKNOWN,
        ),
    ],
)
def test_a_failed_start_is_judged_by_its_exit_and_the_engines_declared_words(
    code: str | int | None, lines: list[str], patterns: bool, expected: StartFailure
) -> None:
    ended = (
        None if code is None else classify(-number(code) if isinstance(code, str) else code, lines)
    )
    declared = (OOM, HOPELESS) if patterns else ((), ())
    assert start_failure(ended, lines, *declared) is expected


def test_a_start_error_carries_what_its_failure_calls_for() -> None:
    sigill = classify(-number("SIGILL"), ["llama_model_load: loading"])
    error = StartError(sigill.report("m: backend", "while starting"), sigill)
    assert error.failure is StartFailure.HOPELESS and not error.retryable
    assert error.should_retry is False
    oom = classify(-number("SIGKILL"), ["ggml_aligned_malloc: insufficient memory"])
    assert StartError("m", oom).failure is StartFailure.OUT_OF_MEMORY
    missing = classify(1, ["gguf_init_from_file: failed to open GGUF file '/x' (No such file)"])
    assert StartError("m", missing).failure is StartFailure.UNKNOWN  # no English guesses
    said = StartError("m", missing, StartFailure.HOPELESS)  # as the supervisor judged it
    assert not said.retryable and said.should_retry is False
    assert StartError("boom").retryable and StartError("boom").exit is None
    assert StartError("boom").should_retry is None


def test_a_launch_spec_refuses_a_pattern_that_is_no_regular_expression() -> None:
    with pytest.raises(ValueError, match="is not a regular expression"):
        LaunchSpec(argv=("x",), hopeless=("([unclosed",))


def test_a_start_errors_reason_is_one_line_that_says_why() -> None:
    sigill = classify(-number("SIGILL"), ["a", "b"], {"SIGILL": SIGILL_ADVICE})
    error = StartError(sigill.report("m: backend", "while starting"), sigill)
    assert error.reason == sigill.sentence("m: backend", "while starting")
    plain = classify(1, ["srv  llama_server: exiting due to model loading error"])
    assert StartError(plain.report("m: backend", "while starting"), plain).reason == (
        "m: backend exited with code 1 while starting. Its last output: srv  llama_server: "
        "exiting due to model loading error"
    )
    assert (
        StartError("m: not ready after 30 s.\nLast output:\nx").reason == "m: not ready after 30 s."
    )


def test_a_broken_connection_says_how_the_backend_died_when_it_did() -> None:
    cause = ConnectionError("peer closed")
    assert broken("backend stream broke", cause, None, "; a worker may have dropped") == (
        "backend stream broke: ConnectionError('peer closed'); a worker may have dropped"
    )
    died = classify(-number("SIGABRT"), [f"line {n}" for n in range(20)])
    said = broken("backend stream broke", cause, died, "; a worker may have dropped")
    assert said.startswith(
        "backend stream broke: the backend died of SIGABRT (aborted) while answering: the "
        "engine stopped itself on a failed check or an error it could not handle. Its last "
        "lines of output say which; a worker may have dropped.\nLast output:\nline 10\n"
    )
    assert said.endswith("line 19") and "line 9\n" not in said  # the last ten lines
