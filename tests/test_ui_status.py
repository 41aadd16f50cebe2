"""The web UI's Status tab in a real headless Chromium against a real server of echo-engine
models (``ui_support.chat_server``): a backend that crashed (its engine killed) shows as
``crashed`` with its count, an asked-for unload as ``unloaded (asked)`` (not an eviction),
and sizes in binary units. Screenshots go to ``tests/results/ui/``."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.testing import ServerProcess, browser_missing

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from ui_support import WORDS_MODEL, chat_server, js, open_tab, screenshot, wait_for

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
EVENTS = (
    "return [...document.querySelectorAll('#event-rows tr.event')]"
    ".map(r => [r.dataset.model, r.cells[2].innerText,"
    " r.cells[2].querySelector('.badge').className])"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with chat_server(tmp_path_factory.mktemp("status")) as s:
        yield s


def health(server: ServerProcess) -> dict[str, Any]:
    return dict(httpx.get(server.url + "/api/v1/health").json())


def chat(server: ServerProcess) -> httpx.Response:
    return httpx.post(
        server.api + "/chat/completions",
        json={"model": WORDS_MODEL, "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )


def test_a_crash_shows_and_an_unload_is_no_eviction(server: ServerProcess, browser: Any) -> None:
    chat(server).raise_for_status()
    [entry] = health(server)["all_models_loaded"]
    os.kill(entry["pid"], signal.SIGKILL)  # the engine dies under the router
    chat(server)  # the router notices (this request may fail or start it again)
    open_tab(browser, server, "status")
    wait_for(
        lambda: [WORDS_MODEL, "crashed", "badge error"] in js(browser, EVENTS), 15, "the crash"
    )
    crashes = js(browser, "return document.querySelector('#crash-counts').textContent")
    assert f"{WORDS_MODEL}: 1" in crashes, crashes
    screenshot(browser, "status-crash")
    if not health(server)["all_models_loaded"]:
        chat(server).raise_for_status()
    httpx.post(server.url + "/api/v1/unload", json={"model_name": WORDS_MODEL}).raise_for_status()
    wait_for(
        lambda: js(browser, EVENTS)[0][:2] == [WORDS_MODEL, "unloaded (asked)"], 15, "the unload"
    )
    assert not any("evicted" in event for _, event, _ in js(browser, EVENTS))
    counts = js(browser, "return document.querySelector('#eviction-counts').textContent")
    assert "No evictions" in counts and "asked: 1" in counts, counts


def test_sizes_are_in_binary_units(server: ServerProcess, browser: Any) -> None:
    chat(server).raise_for_status()
    [entry] = health(server)["all_models_loaded"]
    open_tab(browser, server, "status")
    cell = "document.querySelector(`#loaded-rows tr[data-model='${arguments[0]}']`)?.cells[6]"
    shown = wait_for(lambda: js(browser, f"return {cell}?.innerText", WORDS_MODEL), 15)
    assert entry["peak_memory_bytes"], entry  # measured on Linux
    found = re.fullmatch(r"([\d.]+) (B|KiB|MiB|GiB)", shown)
    assert found, shown
    scale = 1024 ** ["B", "KiB", "MiB", "GiB"].index(found.group(2))
    # One decimal rounds by at most half a unit; the byte of slack absorbs float error at that edge.
    assert abs(float(found.group(1)) * scale - entry["peak_memory_bytes"]) <= 0.05 * scale + 1, (
        shown
    )
