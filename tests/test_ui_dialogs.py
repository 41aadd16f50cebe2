"""The web UI's dialogs in a real headless Chromium, each against a real ``lemon serve`` of
its own: the consent dialog before an experimental install (the core test backend's,
installed by downloading a pinned file from a local HTTP server), and the API key prompt
of a server with a key set (the key kept in memory only). Screenshots go to
``tests/results/ui/``."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.testing import browser_missing, running_server, serve_directory

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from ui_support import LOCAL, js, require_ui_parts, row_text, screenshot, wait_for

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
require_ui_parts()
KEY = "sk-ui-test-key"


def test_an_experimental_install_asks_for_consent(tmp_path: Path, browser: Any) -> None:
    """The test backend made experimental, installed by downloading a pinned file: Cancel
    in the consent dialog installs nothing; consenting installs it (with consent, the
    core refuses a first install without it: 403)."""
    sys.path.insert(0, str(Path(__file__).parent))  # importlib mode adds no test dirs
    from tinyplugin import SCRIPT

    (tmp_path / "www").mkdir()
    engine = b"a pinned engine download " * 4000
    (tmp_path / "www" / "engine.bin").write_bytes(engine)
    row = "document.querySelector(`#backend-rows tr[data-backend='tiny:cpu']`)"
    with (
        serve_directory(tmp_path / "www") as www,
        running_server(
            tmp_path / "lemon",
            command=(
                str(SCRIPT),
                "--experimental",
                f"{www}/engine.bin",
                hashlib.sha256(engine).hexdigest(),
            ),
        ) as s,
    ):

        def state() -> str:
            info = httpx.get(s.url + "/api/v1/system-info").json()
            return str(info["recipes"]["tiny"]["backends"]["cpu"]["state"])

        browser.get(s.url + "/ui/#backends")
        wait_for(
            lambda: js(browser, f"return {row}?.innerText.includes('experimental')"),
            15,
            "the experimental backend's row",
        )

        def install(answer: str) -> None:
            js(
                browser,
                f"[...{row}.querySelectorAll('button')]"
                ".find(b => b.textContent === 'Install').click()",
            )
            wait_for(
                lambda: js(browser, "return document.querySelector('#consent-dialog').open"),
                10,
                "the consent dialog",
            )
            assert (
                js(browser, "return document.querySelector('#consent-name').textContent")
                == "tiny:cpu"
            )
            screenshot(browser, "consent")
            js(
                browser,
                "document.querySelector(`#consent-dialog button[value='${arguments[0]}']`).click()",
                answer,
            )

        install("cancel")
        time.sleep(0.5)
        assert state() == "installable"
        install("ok")
        wait_for(lambda: state() == "installed", 30, "the install")
        wait_for(
            lambda: js(browser, f"return {row}?.innerText.includes('installed')"),
            15,
            "the row to say installed",
        )


def test_a_key_is_asked_for_and_kept_in_memory_only(tmp_path: Path, browser: Any) -> None:
    with running_server(
        tmp_path / "lemon", {"LEMON_PLUGINS_ALLOW": "llamacpp", "LEMON_API_KEY": KEY}
    ) as keyed:
        browser.get(keyed.url + "/ui/")
        wait_for(
            lambda: js(browser, "return document.querySelector('#key-dialog').open"),
            15,
            "the key prompt",
        )
        message = js(browser, "return document.querySelector('#key-message').textContent")
        assert "API key" in message
        screenshot(browser, "key")
        js(
            browser,
            "document.querySelector('#key-input').value = arguments[0];"
            "document.querySelector('#key-ok').click()",
            KEY,
        )
        wait_for(lambda: LOCAL in row_text(browser, LOCAL), 15, "the models, with the key")
        stored = js(browser, "return [localStorage.length, sessionStorage.length, document.cookie]")
        assert stored == [0, 0, ""]
        assert KEY not in json.dumps(js(browser, "return {...localStorage, ...sessionStorage}"))
        # Management needs the admin key, which defaults to the API key: the logs open.
        js(browser, "window.lemonUI.show('logs')")
        wait_for(
            lambda: js(browser, "return document.querySelectorAll('#log-lines div').length"),
            15,
            "the log, with the key",
        )
        assert not js(browser, "return document.querySelector('#key-dialog').open")
        browser.refresh()  # a reload forgets the key: the prompt comes back
        wait_for(
            lambda: js(browser, "return document.querySelector('#key-dialog').open"),
            15,
            "the prompt after a reload",
        )
