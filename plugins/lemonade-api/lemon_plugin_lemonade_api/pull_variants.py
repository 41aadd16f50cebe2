"""Lemonade's ``GET /api/v1/pull/variants?checkpoint=owner/repo[&source=…]``: what a pull
of a Hugging Face repository offers, before anything downloads (``Server::
handle_pull_variants`` in src/cpp/server/server.cpp, ``fetch_pull_variants`` in
hf_variants.cpp, ``detect_registry_url`` and ``parse_remote_registry_source`` in
model_registry.cpp, lemonade-sdk/lemonade @e385039).

Errors are Lemonade's for this route, ``{"error": "<message>"}``:
- 400 ``Missing required query parameter 'checkpoint'``;
- 400 a ``huggingface.co`` or ``modelscope.cn`` URL whose registry is not ``source``
  (``checkpoint URL uses huggingface but source was set to 'modelscope'``), or a
  ``source`` that is neither (``Unsupported model source 'x' …``);
- 400 a checkpoint without ``owner/name``;
- 400 ModelScope, which lemoncore does not pull from (Lemonade does);
- 404 ``Checkpoint 'o/r' not found on Hugging Face``;
- the status of any other failure to list the repository, with its message.

The answer is Lemonade's GGUF shape: ``checkpoint``, ``source``, ``recipe``
(``llamacpp``), ``repo_kind`` (``gguf``), ``suggested_name``, ``suggested_labels``,
``mmproj_files``, ``draft_files`` and ``variants`` (``name``, ``primary_file``, ``files``,
``sharded``, ``size_bytes``: ``null``, as the file list carries no sizes). ONNX and
collection repositories are not recognised (no lemoncore engine runs them)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lemoncore.plugin import Gateway, LemonError, gguf_variants

URL_PREFIXES = {  # detect_registry_url
    "https://huggingface.co/": "huggingface",
    "http://huggingface.co/": "huggingface",
    **{
        f"{scheme}://{host}/models/": "modelscope"
        for scheme in ("https", "http")
        for host in ("modelscope.cn", "www.modelscope.cn", "modelscope.ai", "www.modelscope.ai")
    },
}
MAX_CHECKPOINT = 512
DRAFT_PREFIXES = ("dflash-", "mtp-", "dflash.gguf")  # hf_variants.cpp: speculative drafts


class Refused(Exception):
    """A request this route answers ``{"error": message}`` with ``status``."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def registry(source: str) -> str:
    """``source`` as Lemonade names it (parse_remote_registry_source); ``""`` is
    Hugging Face."""
    found = {"": "huggingface", "hf": "huggingface", "huggingface": "huggingface"}.get(
        source.lower()
    ) or {"ms": "modelscope", "modelscope": "modelscope"}.get(source.lower())
    if found is None:
        raise Refused(
            f"Unsupported model source '{source}' (expected 'huggingface' or 'modelscope')"
        )
    return found


def target(checkpoint: str, source: str | None) -> str:
    """The repository ``checkpoint`` names (a registry URL made ``owner/repo``), refused as
    :mod:`this module <lemon_plugin_lemonade_api.pull_variants>` says."""
    if not checkpoint:
        raise Refused("Missing required query parameter 'checkpoint'")
    if len(checkpoint) > MAX_CHECKPOINT:
        raise Refused(f"'checkpoint' is longer than {MAX_CHECKPOINT} characters")
    prefix = next((p for p in URL_PREFIXES if checkpoint.startswith(p)), None)
    if prefix is not None:
        url_registry = URL_PREFIXES[prefix]
        if source and registry(source) != url_registry:
            raise Refused(f"checkpoint URL uses {url_registry} but source was set to '{source}'")
        path = checkpoint[len(prefix) :].split("?", 1)[0].split("#", 1)[0]
        checkpoint, chosen = "/".join(path.strip("/").split("/")[:2]), url_registry
    else:
        chosen = registry(source or "")
    if "/" not in checkpoint:
        raise Refused("Malformed 'checkpoint': expected a repository id of the form 'owner/name'")
    if chosen != "huggingface":
        raise Refused("lemoncore pulls from Hugging Face only; ModelScope is not supported")
    return checkpoint


async def pull_variants(request: Request) -> Response:
    query = request.query_params
    try:
        repo = target(query.get("checkpoint", ""), query.get("source"))
        try:
            files = await Gateway.of(request).repo_files(repo)
        except LemonError as exc:
            if exc.status == 404:
                raise Refused(f"Checkpoint '{repo}' not found on Hugging Face", 404) from None
            raise Refused(str(exc), exc.status) from None
    except Refused as exc:
        return JSONResponse({"error": str(exc)}, exc.status)
    found = gguf_variants(files)
    if not found:
        message = f"No supported model files found in repository {repo}: no GGUF files"
        return JSONResponse({"error": message}, 400)
    ggufs = [f for f in files if f.lower().endswith(".gguf")]
    mmproj = [f for f in ggufs if "mmproj" in f.lower()]
    labels = ["vision"] if mmproj else []
    labels += [
        label
        for key, label in (("embed", "embeddings"), ("rerank", "reranking"))
        if key in repo.lower()
    ]
    drafts = [f for f in ggufs if f.rsplit("/", 1)[-1].lower().startswith(DRAFT_PREFIXES)]
    return JSONResponse(
        {
            "checkpoint": repo,
            "source": "huggingface",
            "recipe": "llamacpp",
            "repo_kind": "gguf",
            "suggested_name": repo.rsplit("/", 1)[-1],
            "suggested_labels": labels,
            "mmproj_files": mmproj,
            "draft_files": drafts,
            "variants": [
                {
                    "name": v.name,
                    "primary_file": v.primary,
                    "files": list(v.files),
                    "sharded": len(v.files) > 1,
                    "size_bytes": None,
                }
                for v in found
            ],
        }
    )


def routes() -> list[Route]:
    return [Route("/api/v1/pull/variants", pull_variants, methods=["GET"])]
