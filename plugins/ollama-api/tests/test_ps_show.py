"""``/api/ps`` and ``/api/show`` as Ollama reports them, through the real ``ollama``
client against a real ``lemon serve`` running llama-server.

Two copies of SmolLM2 carry other chat templates (same length as its own, so the file's
layout is unchanged): one renders the request's tools, one only mentions the word in a
comment. Ollama's rule reads the word (``server/images.go``
``chatTemplateHasToolSupport``), so both show ``tools``.
"""

from __future__ import annotations

import struct
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import ollama
import pytest

from lemoncore.plugin import ServerProcess

from lemon_plugin_ollama_api.manage import FOREVER

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from ollama_api_support import CHAT, EMBED

LISTED = f"{CHAT}:latest"
TOOLED, MENTIONS = "smol-tools", "smol-mentions-tools"
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt "
    "%}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
RENDERS_TOOLS = (
    "{% for t in tools or [] %}{{ 'Tool: ' + t.function.name + '\\n' }}{% endfor %}" + CHATML
)
MENTIONS_TOOLS = "{# no tools here #}" + CHATML
KEY = b"tokenizer.chat_template" + struct.pack("<I", 8)  # the key, then a string value


def with_template(gguf: bytes, template: str) -> bytes:
    """``gguf`` with its chat template replaced by ``template``, padded with a Jinja
    comment to the old one's length."""
    at = gguf.index(KEY) + len(KEY)
    (length,) = struct.unpack_from("<Q", gguf, at)
    new = template.encode()
    assert len(new) + 4 <= length, "the template must fit in SmolLM2's"
    new += b"{#" + b" " * (length - len(new) - 4) + b"#}"
    return gguf[: at + 8] + new + gguf[at + 8 + length :]


@pytest.fixture(scope="module")
def templated(server: ServerProcess, gguf_bytes: bytes) -> None:
    models = server.log_file.parent / "models"  # lemoncore's model store
    models.mkdir(exist_ok=True)
    for name, template in ((TOOLED, RENDERS_TOOLS), (MENTIONS, MENTIONS_TOOLS)):
        path = models / f"{name}.gguf"
        path.write_bytes(with_template(gguf_bytes, template))
        httpx.post(
            server.url + "/api/v1/pull",
            timeout=60,
            json={
                "model_name": name,
                "checkpoint": f"file:{path}",
                "recipe": "llamacpp",
                "labels": ["chat"],
            },
        ).raise_for_status()


def running(client: ollama.Client) -> list[ollama.ProcessResponse.Model]:
    return list(client.ps().models)


def load(client: ollama.Client, name: str) -> None:
    assert client.generate(model=name, prompt="").done_reason == "load"


@pytest.mark.usefixtures("templated")
def test_capabilities_as_ollama_reads_the_template(client: ollama.Client) -> None:
    assert client.show(LISTED).capabilities == ["completion"]
    assert client.show(EMBED).capabilities == ["embedding"]
    for name in (TOOLED, MENTIONS):  # Ollama's own reading of the template
        assert client.show(name).capabilities == ["completion", "tools"], name
    load(client, TOOLED)
    assert client.show(TOOLED).capabilities == ["completion", "tools"]


def test_a_model_kept_forever_expires_as_ollama_says(client: ollama.Client) -> None:
    """keep_alive -1: Ollama's expires_at is when the model went idle plus Go's longest
    duration (292 years), the same on every call; its CLI shows it as "Forever"."""
    client.generate(model=CHAT, prompt="Hi", options={"num_predict": 1}, keep_alive=-1)
    idle = datetime.now(UTC)
    (first,) = [m for m in running(client) if m.model == LISTED]
    assert first.expires_at is not None
    assert abs(first.expires_at - (idle + FOREVER)) < timedelta(seconds=2)
    assert first.expires_at - datetime.now(UTC) > timedelta(days=20 * 365)  # "Forever"
    time.sleep(1.5)
    (again,) = [m for m in running(client) if m.model == LISTED]
    assert again.expires_at is not None
    assert abs(again.expires_at - first.expires_at) < timedelta(seconds=0.3)


def test_ps_lists_the_longest_to_live_first(client: ollama.Client) -> None:
    client.generate(model=CHAT, prompt="", keep_alive=0)  # unloads it
    assert LISTED not in [m.model for m in running(client)]
    client.embed(model=EMBED, input="red apples", keep_alive="5m")  # loaded first
    client.generate(model=CHAT, prompt="", keep_alive=-1)  # then one kept forever
    listed = running(client)
    assert [m.model for m in listed] == [LISTED, f"{EMBED}:latest"]
    finite = listed[1].expires_at
    assert finite is not None
    assert timedelta(minutes=4) < finite - datetime.now(UTC) <= timedelta(minutes=5)


def test_a_collection_lists_and_shows_under_its_user_id(
    server: ServerProcess, client: ollama.Client
) -> None:
    body = {"model_name": "user.Kit", "recipe": "collection.omni", "components": [EMBED]}
    httpx.post(server.url + "/api/v1/pull", json=body, timeout=60).raise_for_status()
    try:
        tags = {m.model: m for m in client.list().models}
        assert "user.Kit:latest" in tags and "Kit:latest" not in tags
        assert tags["user.Kit:latest"].size == tags[f"{EMBED}:latest"].size  # its one file
        for name in ("user.Kit", "Kit"):
            assert client.show(name).modelfile  # shown as its component
    finally:
        httpx.post(server.url + "/api/v1/delete", json={"model_name": "user.Kit"}, timeout=60)
    assert "user.Kit:latest" not in {m.model for m in client.list().models}
