"""Where a request carries an image, whichever API it speaks, so that one sent to a model
that cannot see is refused as the client's mistake (a 400) before it reaches an engine.

llama-server without a projector (lemoncore's llama.cpp launch never passes
``--mmproj``) answers an image with a 500: ``oaicompat_content_load_media``
(``tools/server/server-common.cpp``) throws ``std::runtime_error("image input is not
supported ...")``, which ``ex_wrapper`` (``tools/server/server.cpp``) answers as
``ERROR_TYPE_SERVER``. A model declares that it sees with the ``vision`` label.

The content parts that are images: chat's ``image_url`` (what Ollama's ``images`` and
every translated request's images become), Anthropic's ``image`` blocks (also inside a
``tool_result``'s content) and the Responses API's ``input_image`` (also in a
``function_call_output``'s output).
"""

from __future__ import annotations

from collections.abc import Mapping

IMAGE_PARTS = frozenset({"image_url", "image", "input_image"})
VISION = "vision"  # the label of a model that takes images
_NESTED = ("content", "output")  # the keys a list of parts hangs from


def first_image(body: Mapping[str, object]) -> str | None:
    """Where the first image in ``body`` is (``messages[0].content[1]``), or ``None``
    when it has none."""
    for field in ("messages", "input"):
        items = body.get(field)
        if not isinstance(items, list):
            continue
        for index, item in enumerate(items):
            if isinstance(item, Mapping) and (found := _in_parts(item, f"{field}[{index}]")):
                return found
    return None


def _in_parts(holder: Mapping[str, object], where: str, depth: int = 0) -> str | None:
    """The first image among the parts ``holder`` lists under ``content`` or ``output``,
    looking one level into each part's own parts (a tool result's)."""
    for key in _NESTED:
        parts = holder.get(key)
        if not isinstance(parts, list):
            continue
        for index, part in enumerate(parts):
            if not isinstance(part, Mapping):
                continue
            at = f"{where}.{key}[{index}]"
            if part.get("type") in IMAGE_PARTS:
                return at
            if depth < 1 and (found := _in_parts(part, at, depth + 1)):
                return found
    return None
