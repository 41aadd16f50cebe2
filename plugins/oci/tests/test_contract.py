"""What an image may be and may ask for, as pure decisions: its reference (pinned by
digest, in a trusted namespace), the labels that narrow its engine's launch contract
and the escalations they are refused, the models label an image declares its models
with, and a tag's digest asked of a registry (a mock transport answering as Docker Hub
does)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from lemoncore.plugin import LaunchRefused

from lemon_plugin_oci import model_label
from lemon_plugin_oci.contracts import HALOGEN, LaunchContract
from lemon_plugin_oci.policy import narrowed
from lemon_plugin_oci.refs import carries, parse_ref

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from contract_support import DIGEST

CONTRACT = LaunchContract(
    command=("llama-server",),
    devices=frozenset({"/dev/dri"}),
    env={"HALOGEN_CTX": "{ctx_size}", "HALOGEN_KV_SLOTS": "4"},
)


def test_trusted_digest_pinned_refs_parse() -> None:
    ref = parse_ref(f"docker://docker.io/kyuz0/amd-strix-halo-toolboxes:vulkan@sha256:{DIGEST}")
    assert ref.pinned == f"docker.io/kyuz0/amd-strix-halo-toolboxes@sha256:{DIGEST}"
    assert ref.tag == "vulkan"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("docker.io/kyuz0/toolbox:latest", "by digest only"),
        (f"docker.io/evil/toolbox:x@sha256:{DIGEST}", "outside the trusted namespaces"),
        (f"ghcr.io/peonist-ai-evil/x:y@sha256:{DIGEST}", "outside the trusted namespaces"),
        (f"kyuz0/toolbox:x@sha256:{DIGEST}", "no registry host"),
        ("docker.io/kyuz0/toolbox@sha256:abc", "by digest only"),
        (f"docker.io/kyuz0/../evil/x:y@sha256:{DIGEST}", "by digest only"),
        (f"docker.io/kyuz0/a..b:y@sha256:{DIGEST}", "by digest only"),
        (f"docker.io/kyuz0/x:t\u00e4g@sha256:{DIGEST}", "by digest only"),
        (f"docker.io/kyuz0/x:t@sha256:{DIGEST}\n", "by digest only"),
    ],
)
def test_other_refs_are_refused(text: str, why: str) -> None:
    with pytest.raises(LaunchRefused, match=why):
        parse_ref(text)


def test_docker_familiar_repo_digests_match_the_pin() -> None:
    """docker shows Docker Hub names without ``docker.io/`` (and ``library/``);
    podman shows them in full. Both carry the pin; another repository does not."""
    ref = parse_ref(f"docker.io/kyuz0/amd-strix-halo-toolboxes:x@sha256:{DIGEST}")
    assert carries([f"kyuz0/amd-strix-halo-toolboxes@sha256:{DIGEST}"], ref)
    assert carries([f"docker.io/kyuz0/amd-strix-halo-toolboxes@sha256:{DIGEST}"], ref)
    assert not carries([f"kyuz0/other@sha256:{DIGEST}"], ref)
    assert not carries([f"kyuz0/amd-strix-halo-toolboxes@sha256:{'b' * 64}"], ref)
    official = parse_ref(f"docker.io/library/ubuntu:24.04@sha256:{DIGEST}", ("docker.io/library/",))
    assert carries([f"ubuntu@sha256:{DIGEST}"], official)


def test_admin_configuration_extends_the_trusted_namespaces() -> None:
    ref = parse_ref(
        f"127.0.0.1:5000/lab/engine:1@sha256:{DIGEST}", ("docker.io/kyuz0/", "127.0.0.1:5000/lab")
    )
    assert ref.repository == "127.0.0.1:5000/lab/engine"
    with pytest.raises(LaunchRefused, match="outside the trusted namespaces"):
        parse_ref(f"ghcr.io/peonist-ai/x:1@sha256:{DIGEST}", ("ghcr.io/peon",))


def test_no_labels_means_the_contract() -> None:
    assert narrowed(CONTRACT, None, "img") == CONTRACT


def test_labels_narrow_the_contract() -> None:
    narrow = narrowed(
        HALOGEN,
        {
            "org.lemonade.devices": "/dev/dri",
            "org.lemonade.env": "HALOGEN_CTX,HALOGEN_KV_SLOTS",
            "org.lemonade.network": "none",
            "org.lemonade.ipc": "private",
            "org.lemonade.port": "8731",
            "org.opencontainers.image.title": "fine",
        },
        "img",
    )
    assert narrow.devices == {"/dev/dri"}
    assert dict(narrow.env) == {"HALOGEN_CTX": "{ctx_size}"}
    assert [s.key for s in narrow.settings] == ["HALOGEN_KV_SLOTS"]
    assert not narrow.ipc_host


@pytest.mark.parametrize(
    ("label", "value"),
    [
        ("org.lemonade.devices", "/dev/kfd"),
        ("org.lemonade.devices", "/dev/dri/../kfd"),
        ("org.lemonade.devices", "/dev/dri/renderD128"),
        ("org.lemonade.ipc", "host"),
        ("org.lemonade.network", "host"),
        ("org.lemonade.env", "LD_PRELOAD"),
        ("org.lemonade.env", "HTTPS_PROXY"),
        ("org.lemonade.env", "NOT_ALLOWED_BY_RECIPE"),
        ("org.lemonade.port", "80"),
        ("org.lemonade.models", '[{"name": "m", "path": "/etc/../models/x"}]'),
        ("org.lemonade.models", '[{"name": "m", "path": 7}]'),
        ("org.lemonade.models", '{"name": "m"}'),
        ("org.lemonade.models", "not json"),
        ("org.lemonade.models", '[{"name": "m", "checkpoint": "file:/etc/shadow"}]'),
        ("org.lemonade.capabilities", "SYS_ADMIN"),
        ("org.lemoncore.owner", "someone-else"),
    ],
)
def test_each_escalation_is_refused_naming_the_label(label: str, value: str) -> None:
    with pytest.raises(LaunchRefused, match=label.replace(".", r"\.")):
        narrowed(CONTRACT, {label: value}, "img")


@pytest.mark.anyio
async def test_tag_digest_follows_docker_hub_s_token_challenge(anyio_backend: str) -> None:
    """The registry exchange as Docker Hub answers it (distribution's token auth spec):
    401 with a Bearer challenge, an anonymous token from the realm, the digest header;
    official images live under library/; a registry that omits the header gets its
    manifest hashed."""
    import hashlib

    import httpx

    from lemon_plugin_oci.registry import tag_digest

    seen: list[str] = []
    manifest = b'{"schemaVersion": 2}'

    def hub(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url}")
        if request.url.host == "auth.docker.io":
            assert request.url.params["scope"] == "repository:library/ubuntu:pull"
            return httpx.Response(200, json={"token": "t0k"})
        if request.headers.get("authorization") != "Bearer t0k":
            return httpx.Response(
                401,
                headers={
                    "www-authenticate": (
                        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
                        'scope="repository:library/ubuntu:pull"'
                    )
                },
            )
        if request.method == "HEAD" and "noheader" not in str(request.url):
            return httpx.Response(200, headers={"docker-content-digest": f"sha256:{'d' * 64}"})
        return httpx.Response(200, content=manifest)

    async with httpx.AsyncClient(transport=httpx.MockTransport(hub)) as client:
        assert await tag_digest(client, "docker.io/ubuntu", "24.04") == f"sha256:{'d' * 64}"
        assert seen[0] == "HEAD https://registry-1.docker.io/v2/library/ubuntu/manifests/24.04"
        hashed = await tag_digest(client, "docker.io/ubuntu", "noheader")
    assert hashed == f"sha256:{hashlib.sha256(manifest).hexdigest()}"


SHA = "b" * 64


def declaring(**entry: object) -> str:
    return json.dumps(
        [
            {
                "name": "Qwen-Declared",
                "checkpoint": "org/repo:w.hgn",
                "files": {
                    "w.hgn": {"size": 10, "sha256": SHA},
                    "tokenizer/tokenizer.json": {"size": 2, "sha256": SHA},
                },
                **entry,
            }
        ]
    )


def test_an_image_label_declares_installable_models_of_its_backend() -> None:
    [model] = model_label.models(
        declaring(labels=["chat"], description="Small."),
        "halogen",
        "rocm",
        "ghcr.io/x/halogen@sha256:1",
    )
    assert model.checkpoint == "org/repo:w.hgn" and model.files == ("tokenizer/tokenizer.json",)
    assert model.sha256 == {"w.hgn": SHA, "tokenizer/tokenizer.json": SHA}
    assert model.sizes == {"w.hgn": 10, "tokenizer/tokenizer.json": 2}
    assert model.recipe == "halogen" and model.recipe_options == {"backend": "rocm"}
    assert model.description == "Small. Declared by the image ghcr.io/x/halogen@sha256:1."
    # Lemonade's earlier {name, path} form is valid and declares nothing to fetch
    assert model_label.models('[{"name": "m", "path": "/models/m.gguf"}]', "r", "b", "i") == ()


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"checkpoint": "file:/etc/shadow"}, "Hugging Face"),
        ({"checkpoint": "https://evil.example/x:w.hgn"}, "Hugging Face"),
        ({"checkpoint": "org/repo:other.gguf"}, "the checkpoint's 'other.gguf' included"),
        ({"files": {"w.hgn": {"size": 10}}}, "sha256 of 64"),
        ({"files": {"w.hgn": {"size": -1, "sha256": SHA}}}, "positive integer size"),
        (
            {
                "files": {
                    "w.hgn": {"size": 10, "sha256": SHA},
                    "../../x": {"size": 1, "sha256": SHA},
                }
            },
            "without '..'",
        ),
        ({"name": "a b"}, "name: String should match pattern"),
        ({"url": "http://x"}, "unknown keys url"),
        ({"labels": "chat"}, "labels"),
    ],
)
def test_a_bad_models_label_says_what_is_wrong(entry: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        model_label.models(declaring(**entry), "r", "b", "i")
    with pytest.raises(LaunchRefused, match=r"org\.lemonade\.models"):
        narrowed(CONTRACT, {"org.lemonade.models": declaring(**entry)}, "img")


def test_a_models_label_is_size_capped() -> None:
    many = json.dumps([{"name": f"m{i}", "path": f"/models/m{i}"} for i in range(17)])
    with pytest.raises(ValueError, match="more than 16"):
        model_label.parse(many)
    with pytest.raises(ValueError, match="longer than"):
        model_label.parse(" " * (model_label.MAX_LABEL + 1))
