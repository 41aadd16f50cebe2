"""Every API surface answers every error in its own shape, with the right status.

The table: each surface (OpenAI's chat completions and models, Anthropic's Messages,
Lemonade's ``/api/v1``, Ollama's ``/api/chat`` through the installed Ollama API plugin)
times each error class (a missing or wrong key, a foreign ``Origin``, an unknown route, a
wrong method, a body over the limit, a body that is not valid or not valid JSON, an
unknown model, an engine's 4xx, an engine's 5xx, an image for a model that cannot see).
Each case is sent the way the surface's SDK sends requests and its error is parsed the
way that SDK parses one: ``openai.APIStatusError`` (``.body``: the error object),
``anthropic.APIStatusError`` (``.type``: ``error.type`` of Anthropic's shape),
``ollama.ResponseError`` (``.error``: the message, which a body in another shape turns
into a dict). The server is a real ``lemon serve``-like process (``shapes_backend.py``):
the echo engine as the engine that answers a 4xx, ``tinyserver.py --answer 500`` as the
one that answers a 5xx. The rules that choose a shape are tested as data in
``test_error_shape_rules.py``.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from lemoncore.api.shapes import anthropic_type
from lemoncore.testing import ServerProcess, running_server

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from shapes_backend import ECHO, SCRIPT, WEDGED

KEY, LIMIT = "shapes-key", 64 * 1024
EVIL = "http://evil.example"
HI = [{"role": "user", "content": "hi"}]
BIG = "a" * (2 * LIMIT)
TOO_MANY = 10_000  # max_tokens past the echo engine's context: its 400 (and under the
# anthropic SDK's cap on a non-streamed request, _base_client.py _calculate_nonstreaming_timeout)
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()  # a PNG's magic


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {
        "LEMON_API_KEY": KEY,
        "LEMON_MAX_BODY_BYTES": str(LIMIT),
        "LEMON_MAX_LOADED_MODELS": "-1",
    }
    with running_server(tmp_path_factory.mktemp("shapes"), env, command=(str(SCRIPT),)) as s:
        yield s


class Clients:
    """The SDK clients one case makes, each closed when the case ends."""

    def __init__(self, server: ServerProcess, stack: ExitStack) -> None:
        self.url, self.stack = server.url, stack

    def gpt(self, key: str = KEY, base: str = "/v1", **headers: str) -> openai.OpenAI:
        return self.stack.enter_context(
            openai.OpenAI(
                base_url=self.url + base, api_key=key, max_retries=0, default_headers=headers
            )
        )

    def claude(self, key: str = KEY, **headers: str) -> anthropic.Anthropic:
        return self.stack.enter_context(
            anthropic.Anthropic(
                base_url=self.url, api_key=key, max_retries=0, default_headers=headers
            )
        )

    def llama(self, key: str | None = KEY, **headers: str) -> ollama.Client:
        auth = {"Authorization": f"Bearer {key}"} if key else {}
        return self.stack.enter_context(
            ollama.Client(host=self.url, timeout=60, headers={**auth, **headers})
        )


Call = Callable[[Clients], object]


@pytest.fixture
def clients(server: ServerProcess) -> Iterator[Clients]:
    with ExitStack() as stack:
        yield Clients(server, stack)


def raw_ollama(method: str, path: str, content: Any = None) -> Call:
    """A request the ollama client has no call for, its error read as the client reads
    one (ollama 0.6.3, ``_client.py`` ``Client._request_raw``)."""

    def call(c: Clients) -> object:
        answer = httpx.request(
            method,
            c.url + path,
            content=content,
            timeout=60,
            headers={"Authorization": f"Bearer {KEY}"},
        )
        if answer.status_code >= 400:
            raise ollama.ResponseError(answer.text, answer.status_code)
        return answer

    return call


def chunks() -> Iterator[bytes]:
    """A body sent without Content-Length (chunked), over the limit."""
    yield b'{"model": "' + ECHO.encode() + b'", "x": "'
    for _ in range(3):
        yield b"a" * LIMIT
    yield b'"}'


def anthropic_image(c: Clients) -> object:
    return c.claude().messages.create(
        model=ECHO,
        max_tokens=8,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                ],
            }
        ],
    )


def openai_image(c: Clients) -> object:
    return c.gpt().chat.completions.create(
        model=ECHO,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            }
        ],
    )


TABLE: dict[tuple[str, str], tuple[int, Call]] = {
    # OpenAI: chat completions
    ("openai", "wrong key"): (
        401,
        lambda c: c.gpt("wrong").chat.completions.create(model=ECHO, messages=HI),
    ),
    ("openai", "foreign origin"): (
        403,
        lambda c: c.gpt(Origin=EVIL).chat.completions.create(model=ECHO, messages=HI),
    ),
    ("openai", "unknown route"): (404, lambda c: c.gpt().get("/nothing-here", cast_to=object)),
    ("openai", "wrong method"): (405, lambda c: c.gpt().get("/chat/completions", cast_to=object)),
    ("openai", "body too large"): (
        413,
        lambda c: c.gpt().chat.completions.create(
            model=ECHO, messages=[{"role": "user", "content": BIG}]
        ),
    ),
    ("openai", "chunked body too large"): (
        413,
        lambda c: c.gpt().post("/chat/completions", content=chunks(), cast_to=object),
    ),
    ("openai", "invalid JSON"): (
        400,
        lambda c: c.gpt().post("/chat/completions", content=b"{not json", cast_to=object),
    ),
    ("openai", "invalid body"): (
        400,
        lambda c: c.gpt().post("/chat/completions", body={"model": ECHO}, cast_to=object),
    ),
    ("openai", "unknown model"): (
        404,
        lambda c: c.gpt().chat.completions.create(model="no-such-model", messages=HI),
    ),
    ("openai", "engine 4xx"): (
        400,
        lambda c: c.gpt().chat.completions.create(model=ECHO, messages=HI, max_tokens=TOO_MANY),
    ),
    ("openai", "engine 5xx"): (
        502,
        lambda c: c.gpt().chat.completions.create(model=WEDGED, messages=HI),
    ),
    ("openai", "image, no vision"): (400, openai_image),
    # OpenAI: models
    ("models", "wrong key"): (401, lambda c: c.gpt("wrong").models.list()),
    ("models", "foreign origin"): (403, lambda c: c.gpt(Origin=EVIL).models.list()),
    ("models", "wrong method"): (405, lambda c: c.gpt().post("/models", cast_to=object)),
    ("models", "body too large"): (
        413,
        lambda c: c.gpt().post("/models", body={"x": BIG}, cast_to=object),
    ),
    ("models", "invalid query"): (
        400,
        lambda c: c.gpt().models.list(extra_query={"show_all": "maybe"}),
    ),
    ("models", "unknown model"): (404, lambda c: c.gpt().models.retrieve("no-such-model")),
    # Anthropic: messages (and any /v1 path for the client, which sends anthropic-version)
    ("anthropic", "wrong key"): (
        401,
        lambda c: c.claude("wrong").messages.create(model=ECHO, max_tokens=8, messages=HI),
    ),
    ("anthropic", "foreign origin"): (
        403,
        lambda c: c.claude(Origin=EVIL).messages.create(model=ECHO, max_tokens=8, messages=HI),
    ),
    ("anthropic", "unknown route"): (
        404,
        lambda c: c.claude().get("/v1/nothing-here", cast_to=object),
    ),
    ("anthropic", "wrong method"): (405, lambda c: c.claude().get("/v1/messages", cast_to=object)),
    ("anthropic", "body too large"): (
        413,
        lambda c: c.claude().messages.create(
            model=ECHO, max_tokens=8, messages=[{"role": "user", "content": BIG}]
        ),
    ),
    ("anthropic", "chunked body too large"): (
        413,
        lambda c: c.claude().post("/v1/messages", content=chunks(), cast_to=object),
    ),
    ("anthropic", "invalid JSON"): (
        400,
        lambda c: c.claude().post("/v1/messages", content=b"{not json", cast_to=object),
    ),
    ("anthropic", "invalid body"): (
        400,
        lambda c: c.claude().post(
            "/v1/messages", body={"model": ECHO, "max_tokens": 8}, cast_to=object
        ),
    ),
    ("anthropic", "unknown model"): (
        404,
        lambda c: c.claude().messages.create(model="no-such-model", max_tokens=8, messages=HI),
    ),
    ("anthropic", "unknown model (models API)"): (
        404,
        lambda c: c.claude().models.retrieve("no-such-model"),
    ),
    ("anthropic", "engine 4xx"): (
        400,
        lambda c: c.claude().messages.create(model=ECHO, max_tokens=TOO_MANY, messages=HI),
    ),
    ("anthropic", "engine 5xx"): (
        502,
        lambda c: c.claude().messages.create(model=WEDGED, max_tokens=8, messages=HI),
    ),
    ("anthropic", "image, no vision"): (400, anthropic_image),
    # Lemonade: /api/v1
    ("lemonade", "wrong key"): (
        401,
        lambda c: c.gpt("wrong", "/api/v1").get("/health", cast_to=object),
    ),
    ("lemonade", "foreign origin"): (
        403,
        lambda c: c.gpt(base="/api/v1", Origin=EVIL).get("/health", cast_to=object),
    ),
    ("lemonade", "unknown route"): (
        404,
        lambda c: c.gpt(base="/api/v1").get("/nothing-here", cast_to=object),
    ),
    ("lemonade", "wrong method"): (
        405,
        lambda c: c.gpt(base="/api/v1").get("/load", cast_to=object),
    ),
    ("lemonade", "body too large"): (
        413,
        lambda c: c.gpt(base="/api/v1").post(
            "/load", body={"model_name": ECHO, "x": BIG}, cast_to=object
        ),
    ),
    ("lemonade", "invalid body"): (
        400,
        lambda c: c.gpt(base="/api/v1").post(
            "/load", body={"model_name": ECHO, "pinned": "yes"}, cast_to=object
        ),
    ),
    ("lemonade", "unknown model"): (
        404,
        lambda c: c.gpt(base="/api/v1").post(
            "/load", body={"model_name": "no-such-model"}, cast_to=object
        ),
    ),
    ("lemonade", "engine 4xx"): (
        400,
        lambda c: c.gpt(base="/api/v1").chat.completions.create(
            model=ECHO, messages=HI, max_tokens=TOO_MANY
        ),
    ),
    ("lemonade", "engine 5xx"): (
        502,
        lambda c: c.gpt(base="/api/v1").chat.completions.create(model=WEDGED, messages=HI),
    ),
    # Ollama, through the installed plugin
    ("ollama", "missing key"): (401, lambda c: c.llama(None).chat(model=ECHO, messages=HI)),
    ("ollama", "foreign origin"): (
        403,
        lambda c: c.llama(Origin=EVIL).chat(model=ECHO, messages=HI),
    ),
    ("ollama", "unknown route"): (404, raw_ollama("GET", "/api/nothing-here")),
    ("ollama", "wrong method"): (405, raw_ollama("GET", "/api/chat")),
    ("ollama", "body too large"): (
        413,
        lambda c: c.llama().chat(model=ECHO, messages=[{"role": "user", "content": BIG}]),
    ),
    ("ollama", "chunked body too large"): (413, raw_ollama("POST", "/api/chat", chunks())),
    ("ollama", "invalid JSON"): (400, raw_ollama("POST", "/api/chat", b"{not json")),
    ("ollama", "unknown model"): (
        404,
        lambda c: c.llama().chat(model="no-such-model", messages=HI),
    ),
    ("ollama", "engine 4xx"): (
        400,
        lambda c: c.llama().chat(model=ECHO, messages=HI, options={"num_predict": TOO_MANY}),
    ),
    ("ollama", "engine 5xx"): (502, lambda c: c.llama().chat(model=WEDGED, messages=HI)),
    ("ollama", "image, no vision"): (
        400,
        lambda c: c.llama().chat(
            model=ECHO, messages=[{"role": "user", "content": "What is this?", "images": [PNG]}]
        ),
    ),
}
SDK_ERROR = {
    "openai": openai.APIStatusError,
    "models": openai.APIStatusError,
    "lemonade": openai.APIStatusError,
    "anthropic": anthropic.APIStatusError,
    "ollama": ollama.ResponseError,
}


def in_openai_shape(error: openai.APIStatusError) -> None:
    assert set(error.response.json()) == {"error"}
    assert isinstance(error.body, dict)  # the SDK's error object: {"error": ...}'s value
    assert isinstance(error.body.get("message"), str) and error.body["message"]
    assert isinstance(error.body.get("type"), str)


def in_anthropic_shape(error: anthropic.APIStatusError, status: int) -> None:
    assert error.type == anthropic_type(status)  # the SDK's reading of error.type
    assert isinstance(error.api_message, str) and error.api_message
    body = error.response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}


def in_ollama_shape(error: ollama.ResponseError) -> None:
    # a body in another shape makes .error its "error" value: a dict, not the message
    assert isinstance(error.error, str) and error.error and not error.error.startswith("{")


@pytest.mark.parametrize(("surface", "case"), list(TABLE), ids=[f"{s}: {c}" for s, c in TABLE])
def test_every_surface_answers_every_error_in_its_own_shape(
    clients: Clients, surface: str, case: str
) -> None:
    status, call = TABLE[surface, case]
    with pytest.raises(SDK_ERROR[surface]) as caught:
        call(clients)
    error = caught.value
    assert error.status_code == status, str(error)
    if isinstance(error, openai.APIStatusError):
        in_openai_shape(error)
    elif isinstance(error, anthropic.APIStatusError):
        in_anthropic_shape(error, status)
    else:
        assert isinstance(error, ollama.ResponseError)
        in_ollama_shape(error)


def test_an_image_is_refused_before_the_engine_with_where_it_is(clients: Clients) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_image(clients)
    assert refused.value.code == "images_not_supported"
    assert refused.value.param == "messages[0].content[1]"
    assert "vision" in refused.value.message
