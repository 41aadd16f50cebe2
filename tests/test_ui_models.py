"""The web UI's Models tab in a real headless Chromium against a real ``lemon serve`` with
the llama.cpp plugin (no model is loaded): sizes in binary units ("—" when unknown), only
the backends that can run here, a failed Add that ends in its error in the Add form (and
leaves no model behind), and every tab fitting a 420 px wide screen. Screenshots go to
``tests/results/ui/``."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.testing import ServerProcess, browser_missing, running_server, serve_hub

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from ui_support import js, open_tab, require_ui_parts, row_text, screenshot, wait_for

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
require_ui_parts()
UNITS = ["B", "KiB", "MiB", "GiB", "TiB"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("models")
    with (
        serve_hub({}) as hub,  # it has no file: every pull from it fails
        running_server(
            tmp / "lemon",
            {
                "LEMON_PLUGINS_ALLOW": "llamacpp",
                "HF_ENDPOINT": hub,
                "HF_HOME": str(tmp / "hf"),
                "HF_HUB_OFFLINE": "0",
            },
        ) as s,
    ):
        yield s


def cell(browser: Any, model: str, selector: str) -> str:
    return str(
        js(
            browser,
            "return document.querySelector(`#model-rows tr[data-model='${arguments[0]}'] "
            "${arguments[1]}`).textContent",
            model,
            selector,
        )
    )


def test_rows_show_sizes_and_the_usable_backends(server: ServerProcess, browser: Any) -> None:
    models = httpx.get(server.api + "/models", params={"show_all": "true"}).json()["data"]
    info = httpx.get(server.url + "/api/v1/system-info").json()
    open_tab(browser, server, "models")
    wait_for(lambda: all(m["id"] in row_text(browser, m["id"]) for m in models), 15, "the rows")
    for model in models:
        size = cell(browser, model["id"], "td:nth-child(3)")
        if model.get("size_bytes") is None:
            assert size == "—", (model["id"], size)
        else:
            found = re.fullmatch(r"([\d.]+) (B|KiB|MiB|GiB|TiB)", size)
            assert found, (model["id"], size)
            scale = 1024 ** UNITS.index(found.group(2))
            assert abs(float(found.group(1)) * scale - model["size_bytes"]) <= 0.05 * scale
        states = info["recipes"][model["recipe"]]["backends"]
        usable = [
            b["name"] for b in model["backends"] if states[b["name"]]["state"] != "unsupported"
        ]
        assert usable and len(usable) < len(model["backends"])  # some cannot run here
        shown = cell(browser, model["id"], "td:nth-child(2) .muted").split(", ")
        assert [name.split(" ")[0] for name in shown] == usable
    assert {m.get("size_bytes") is None for m in models} == {True, False}  # both are shown
    screenshot(browser, "models-sizes")


def test_a_failed_add_ends_in_its_error_in_the_form(server: ServerProcess, browser: Any) -> None:
    open_tab(browser, server, "models")
    name = "ui-ghost"
    wait_for(lambda: js(browser, "return document.querySelectorAll('#model-rows tr').length"), 15)
    js(browser, "document.querySelector('#model-rows tr').dataset.before = 'the add'")
    js(
        browser,
        """document.querySelector('#add-model').open = true;
        const f = document.querySelector('#add-form');
        f.model_name.value = arguments[0]; f.checkpoint.value = 'nobody/missing-GGUF:missing.gguf';
        f.recipe.value = 'llamacpp'; f.requestSubmit();""",
        name,
    )
    label = "document.querySelector('#add-progress .progress-label')"
    shown = wait_for(
        lambda: js(browser, f"return {label}.classList.contains('error') && {label}.textContent"),
        60,
        "the pull's end",
    )
    assert shown.startswith("failed: ") and len(shown) > len("failed: "), shown
    # The list was refreshed: the server kept no model of it, and no row shows its error.
    wait_for(
        lambda: js(browser, "return !document.querySelector('#model-rows tr').dataset.before"),
        15,
        "the refresh",
    )
    assert name not in js(browser, "return document.querySelector('#model-rows').innerText")
    assert not js(browser, "return document.querySelectorAll('#model-rows .error').length")
    models = httpx.get(server.api + "/models", params={"show_all": "true"}).json()["data"]
    assert name not in {m["id"] for m in models}
    screenshot(browser, "models-add-failed")


def test_every_tab_fits_a_420_px_screen(server: ServerProcess, browser: Any) -> None:
    size = browser.get_window_size()
    browser.set_window_size(420, 860)
    try:
        open_tab(browser, server, "models")
        assert js(browser, "return window.innerWidth") <= 420
        for tab in ("models", "backends", "chat", "logs", "status"):
            js(browser, "window.lemonUI.show(arguments[0])", tab)
            if tab == "models":
                wait_for(lambda: js(browser, "return document.querySelector('#model-rows tr')"))
                screenshot(browser, "models-420px")
            width = js(browser, "return document.documentElement.scrollWidth")
            assert width <= 420, f"the {tab} tab is {width} px wide"
    finally:
        browser.set_window_size(size["width"], size["height"])
