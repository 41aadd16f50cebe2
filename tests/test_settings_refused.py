"""Settings that cannot be used are refused at start, saying which and why, never with a
traceback: an empty key is no key (it would leave every route open)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from lemoncore import Settings


@pytest.mark.parametrize("name", ["api_key", "admin_api_key"])
@pytest.mark.parametrize("empty", ["", "   "])
def test_an_empty_key_is_refused(name: str, empty: str) -> None:
    with pytest.raises(ValidationError, match="is set but empty"):
        Settings(**{name: empty})
    assert Settings(**{name: "k"}).model_dump()[name] is not None


def test_lemon_serve_with_an_empty_key_says_so_and_exits(tmp_path: object) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LEMON_")},
        "LEMON_API_KEY": "",
        "LEMON_CACHE_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "lemoncore.cli", "serve", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "lemon: setting api_key (LEMON_API_KEY): is set but empty: give it "
        "a key, or unset it to serve without one\n"
    )
