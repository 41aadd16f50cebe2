"""The CLI's download progress (``lemon backends install``, ``lemon validate``)."""

from __future__ import annotations

import pytest

from lemoncore.cli.common import progress_bar


def test_a_finished_download_leaves_one_complete_line_off_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show = progress_bar("llamacpp:cpu")
    for done in (0, 4_000_000, 10_000_000):
        show(done, 10_000_000)
    err = capsys.readouterr().err
    assert err.count("llamacpp:cpu") == 1 and "100%" in err and "10.0/10.0 MB" in err
    assert "\r" not in err  # no live redraws into a pipe or a log
