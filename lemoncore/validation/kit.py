"""Running checks as the report counts them: each one timed, its exception turned into a
``failed`` result with what went wrong, :class:`CheckSkipped` (or pytest's skip, under
pytest) into ``skipped``; the conformance kit's checks and a plugin's field checks run
through here."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from lemoncore.fieldchecks import CheckSkipped, FieldCheck, FieldContext, FieldResult
from lemoncore.validation.report import CheckResult


def _skipped(exc: BaseException) -> bool:
    pytest = sys.modules.get("pytest")
    return isinstance(exc, CheckSkipped) or (
        pytest is not None and isinstance(exc, pytest.skip.Exception)
    )


def run_check(group: str, name: str, description: str, call: Callable[[], Any]) -> CheckResult:
    """Run ``call``; a :class:`FieldResult` it returns gives the facts and stand-in."""
    started = time.perf_counter()
    result = CheckResult(group, name, description, "passed")
    try:
        returned = call()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - every outcome is reported
        if _skipped(exc):
            result.status, result.output = "skipped", str(getattr(exc, "msg", "") or exc)
        else:
            result.status, result.output = "failed", failure(exc)
    else:
        if isinstance(returned, FieldResult):
            result.facts, result.standin = dict(returned.facts), returned.standin
    result.seconds = round(time.perf_counter() - started, 3)
    return result


def failure(exc: BaseException) -> str:
    """What went wrong: an assertion's message (or the failing line), else the traceback's
    last frames."""
    if isinstance(exc, AssertionError):
        if str(exc):
            return str(exc)
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return f"assertion failed: {frame.line} ({frame.name}, line {frame.lineno})"
    lines = traceback.format_exception(exc, limit=-3)
    return "".join(lines).strip()


def run_field_check(check: FieldCheck, context: FieldContext) -> CheckResult:
    return run_check("field", check.name, check.description, lambda: check.function(context))
