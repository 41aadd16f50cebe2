"""The web UI's Chat tab in a real headless Chromium against a real server of two echo-engine
chat models (``ui_support.chat_server``; one loaded at a time): reasoning shown collapsed,
the system prompt and sampling sent only when set, regenerate, copy and edit, the
conversations kept in the browser (never the key), and a conversation's model kept when
another model gets loaded. Screenshots go to ``tests/results/ui/``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lemoncore.testing import ServerProcess, browser_missing

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from echoplugin import WORDS
from ui_support import (
    REPLY,
    THINKS,
    THOUGHT,
    WORDS_MODEL,
    ask,
    chat_server,
    js,
    loaded,
    open_tab,
    row_text,
    screenshot,
    wait_for,
)

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
KEY = "sk-ui-chat-key"
ANSWERS = "return [...document.querySelectorAll('.msg.assistant .body')].map(b => b.textContent)"
# Every /v1/chat/completions body the page sends, in window.sent
RECORD_BODIES = """window.sent = []; const fetched = window.fetch;
window.fetch = (url, options) => {
  if (String(url).includes('/chat/completions')) window.sent.push(JSON.parse(options.body));
  return fetched(url, options); };"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with chat_server(tmp_path_factory.mktemp("chat"), {"LEMON_MAX_LOADED_MODELS": "1"}) as s:
        yield s


def fresh_chat(browser: Any, server: ServerProcess) -> None:
    """The Chat tab of a page just loaded, with no conversation stored."""
    open_tab(browser, server, "chat")
    js(browser, "localStorage.clear()")
    browser.refresh()
    wait_for(lambda: js(browser, "return !!window.lemonUI"), 10, "the UI")
    js(browser, "window.lemonUI.show('chat')")
    wait_for(
        lambda: js(browser, "return document.querySelector('#chat-model').value"), 10, "models"
    )


def pick(browser: Any, model: str) -> None:
    js(
        browser,
        "const s = document.querySelector('#chat-model'); s.value = arguments[0];"
        "s.dispatchEvent(new Event('change'))",
        model,
    )


def answered(browser: Any, count: int) -> list[str]:
    """The answers once there are ``count`` and none is streaming."""
    return list(
        wait_for(
            lambda: (
                js(browser, "return document.querySelector('#chat-stop').disabled")
                and len(answers := js(browser, ANSWERS)) == count
                and answers
            ),
            30,
            f"{count} answers",
        )
    )


def stored(browser: Any) -> list[dict[str, Any]]:
    return list(json.loads(js(browser, "return localStorage['lemoncore.conversations'] || '[]'")))


def test_reasoning_is_shown_collapsed(server: ServerProcess, browser: Any) -> None:
    fresh_chat(browser, server)
    pick(browser, THINKS)
    ask(browser, "hello")
    assert answered(browser, 1) == [REPLY]  # the reasoning is not in the answer
    details = "document.querySelector('.msg.assistant details.reasoning')"
    assert js(browser, f"return {details}.open") is False
    assert js(browser, f"return !{details}.hidden") is True
    assert js(browser, f"return {details}.querySelector('.thought').textContent") == THOUGHT
    js(browser, f"{details}.open = true")
    screenshot(browser, "chat-reasoning")
    assert stored(browser)[0]["messages"][1]["reasoning"] == THOUGHT


def test_settings_are_sent_only_when_set(server: ServerProcess, browser: Any) -> None:
    fresh_chat(browser, server)
    pick(browser, WORDS_MODEL)
    js(browser, RECORD_BODIES)
    js(
        browser,
        """document.querySelector('#chat-settings').open = true;
        for (const [sel, value] of [['#chat-system', 'Answer briefly.'],
            ['#chat-temperature', '0.3'], ['#chat-max-tokens', '3']]) {
          const input = document.querySelector(sel); input.value = value;
          input.dispatchEvent(new Event('input', {bubbles: true}));
        }""",
    )
    ask(browser, "first")
    assert answered(browser, 1) == [" ".join(WORDS.split()[:3])]  # max_tokens reached it
    [body] = js(browser, "return window.sent")
    assert body["messages"][0] == {"role": "system", "content": "Answer briefly."}
    assert body["temperature"] == 0.3 and body["max_tokens"] == 3 and "top_p" not in body
    js(
        browser,
        """for (const sel of ['#chat-system', '#chat-temperature', '#chat-max-tokens']) {
          const input = document.querySelector(sel); input.value = '';
          input.dispatchEvent(new Event('input', {bubbles: true})); }""",
    )
    ask(browser, "second")
    answered(browser, 2)
    second = js(browser, "return window.sent")[1]
    assert not {"temperature", "top_p", "max_tokens"} & set(second)
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    # A value out of range is refused in the page, saying what to fix; nothing is sent.
    js(browser, "document.querySelector('#chat-top-p').value = '7'")
    ask(browser, "third")
    message = wait_for(lambda: js(browser, "return document.querySelector('#notice').innerText"))
    assert message.startswith("top_p:"), message
    assert len(js(browser, "return window.sent")) == 2


def test_regenerate_copy_and_edit(server: ServerProcess, browser: Any) -> None:
    fresh_chat(browser, server)
    pick(browser, WORDS_MODEL)
    js(browser, RECORD_BODIES)
    ask(browser, "first question")
    [answer] = answered(browser, 1)
    js(browser, "document.querySelector('.msg.assistant button.regenerate').click()")
    wait_for(lambda: len(js(browser, "return window.sent")) == 2, 10, "the second request")
    assert answered(browser, 1) == [answer]  # it replaced the answer, not added one
    assert js(browser, "return window.sent[1].messages") == [
        {"role": "user", "content": "first question"}
    ]
    browser.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": server.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    js(browser, "document.querySelector('.msg.assistant button.copy').click()")
    wait_for(
        lambda: js(browser, "return document.querySelector('button.copy').textContent") == "Copied",
        10,
        "the copy",
    )
    copied = browser.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], e => arguments[0](String(e)))"
    )
    assert copied == answer.strip()
    ask(browser, "second question")
    answered(browser, 2)
    # Edit the first question: what followed it is dropped, the edited one asked.
    js(
        browser,
        """document.querySelector('.msg.user button.edit').click();
        document.querySelector('.msg.user textarea.edit-text').value = 'edited question';
        document.querySelector('.msg.user button.send-edit').click();""",
    )
    wait_for(lambda: len(js(browser, "return window.sent")) == 4, 10, "the edited request")
    answered(browser, 1)
    assert js(browser, "return window.sent[3].messages") == [
        {"role": "user", "content": "edited question"}
    ]
    users = js(browser, "return [...document.querySelectorAll('.msg.user')].map(m => m.innerText)")
    assert len(users) == 1 and "edited question" in users[0]
    assert [m["role"] for m in stored(browser)[0]["messages"]] == ["user", "assistant"]
    assert stored(browser)[0]["messages"][0]["content"] == "edited question"


def test_conversations_are_kept_listed_and_deleted(server: ServerProcess, browser: Any) -> None:
    fresh_chat(browser, server)
    titles = (
        "return [...document.querySelectorAll('#conversation-list .open')].map(b => b.textContent)"
    )
    ask(browser, "alpha question")
    answered(browser, 1)
    js(browser, "document.querySelector('#chat-clear').click()")
    assert js(browser, ANSWERS) == []
    ask(browser, "beta question")
    answered(browser, 1)
    assert js(browser, titles) == ["beta question", "alpha question"]
    browser.refresh()  # kept in the browser
    wait_for(lambda: js(browser, titles) == ["beta question", "alpha question"], 10, "the list")
    js(
        browser,
        "[...document.querySelectorAll('#conversation-list .open')]"
        ".find(b => b.textContent === 'alpha question').click()",
    )
    assert "alpha question" in js(browser, "return document.querySelector('#chat-log').innerText")
    screenshot(browser, "chat-conversations")
    js(
        browser,
        "[...document.querySelectorAll('#conversation-list li')].find(li => "
        "li.innerText.includes('beta')).querySelector('.delete').click()",
    )
    assert js(browser, titles) == ["alpha question"]
    assert [c["messages"][0]["content"] for c in stored(browser)] == ["alpha question"]


def test_a_conversation_keeps_its_model(server: ServerProcess, browser: Any) -> None:
    """Loading another model elsewhere (which evicts this one: one model at a time) does
    not change the conversation's model; a new conversation shows the loaded one."""
    httpx.post(server.url + "/api/v1/load", json={"model_name": WORDS_MODEL}, timeout=60)
    fresh_chat(browser, server)
    assert js(browser, "return document.querySelector('#chat-model').value") == WORDS_MODEL
    ask(browser, "hello")
    answered(browser, 1)
    httpx.post(server.url + "/api/v1/load", json={"model_name": THINKS}, timeout=60)
    assert loaded(server) == [THINKS]
    open_tab(browser, server, "models")  # the page learns of the load
    wait_for(lambda: "loaded ·" in row_text(browser, THINKS), 10, "the load, on the page")
    open_tab(browser, server, "chat")
    assert js(browser, "return document.querySelector('#chat-model').value") == WORDS_MODEL
    ask(browser, "again")
    answered(browser, 2)
    assert loaded(server) == [WORDS_MODEL]  # the conversation's model answered
    browser.refresh()
    wait_for(lambda: js(browser, "return !!window.lemonUI"), 10, "the UI")
    js(browser, "window.lemonUI.show('chat')")
    js(browser, "document.querySelector('#conversation-list .open').click()")
    assert js(browser, "return document.querySelector('#chat-model').value") == WORDS_MODEL
    assert stored(browser)[0]["model"] == WORDS_MODEL


def test_the_key_is_never_stored(tmp_path: Path, browser: Any) -> None:
    with chat_server(tmp_path / "lemon", {"LEMON_API_KEY": KEY}) as keyed:
        browser.get(keyed.url + "/ui/#chat")
        wait_for(
            lambda: js(browser, "return document.querySelector('#key-dialog').open"),
            15,
            "the key prompt",
        )
        js(
            browser,
            "document.querySelector('#key-input').value = arguments[0];"
            "document.querySelector('#key-ok').click()",
            KEY,
        )
        wait_for(lambda: js(browser, "return document.querySelector('#chat-model').value"), 15)
        ask(browser, "hello")
        answered(browser, 1)
        assert stored(browser)[0]["messages"][0]["content"] == "hello"  # the chat is kept
        everything = js(
            browser,
            "return JSON.stringify([{...localStorage}, {...sessionStorage}, document.cookie])",
        )
        assert KEY not in everything
