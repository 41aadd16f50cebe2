"""Anthropic's Models API shape of ``GET /v1/models`` and ``GET /v1/models/{model_id}``,
answered when the caller is an Anthropic client: it sends ``anthropic-version``, as the
anthropic SDK does on every request (anthropic 2.15, ``_client.py``
``Anthropic.default_headers``).

A model is ``{"type": "model", "id", "display_name", "created_at", "lifecycle"}`` (the
SDK's ``types/model_info.py`` ``ModelInfo``; ``created_at`` is RFC 3339, the epoch when
the release date is unknown, as Anthropic's documentation allows). A list is one page:
``{"data", "has_more", "first_id", "last_id"}``, paged by ``limit`` (1 to 1000, default
20), ``after_id`` or ``before_id`` and filtered by ``lifecycle``, which is how the SDK's
``SyncPage`` (``pagination.py``) reads and asks for the next page. Every lemoncore model is
``active``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import AwareDatetime, Field, JsonValue
from starlette.datastructures import Headers, QueryParams

from lemoncore.api import replies
from lemoncore.api.errors import ApiError

# the header every Anthropic client sends; lemoncore.api.shapes answers errors by it too
ANTHROPIC_VERSION = "anthropic-version"
LIFECYCLES = ("active", "deprecated", "retired")
DEFAULT_LIMIT, MAX_LIMIT = 20, 1000  # Anthropic's (the SDK's `limit` docstring)


def asks_anthropic(headers: Headers) -> bool:
    """Whether the caller speaks Anthropic's API (it sends ``anthropic-version``)."""
    return ANTHROPIC_VERSION in headers


class AnthropicModel(replies.Reply):
    """A model as Anthropic's Models API describes one."""

    type: Literal["model"] = "model"
    id: str
    display_name: str
    created_at: AwareDatetime = Field(description="RFC 3339; the epoch: unknown")
    lifecycle: Literal["active"] = "active"

    @classmethod
    def of(cls, card: replies.ModelCard) -> AnthropicModel:
        return cls(
            id=card.id, display_name=card.id, created_at=datetime.fromtimestamp(card.created, UTC)
        )


class AnthropicModelList(replies.Reply):
    """One page of Anthropic's model list."""

    data: list[AnthropicModel]
    has_more: bool = Field(description="Whether more models lie in the page's direction")
    first_id: str | None = Field(description="`before_id` of the page before; null: none")
    last_id: str | None = Field(description="`after_id` of the page after; null: none")


@dataclass(frozen=True)
class PageQuery:
    """What a list request asks for: at most ``limit`` models after ``after_id`` or
    before ``before_id``, in one of ``lifecycles``."""

    limit: int = DEFAULT_LIMIT
    after_id: str | None = None
    before_id: str | None = None
    lifecycles: tuple[str, ...] = ("active", "deprecated")

    @classmethod
    def of(cls, query: QueryParams) -> PageQuery:
        """The query's paging, or a 400 naming the parameter that does not fit."""
        limit = query.get("limit")
        if limit is not None and not (
            re.fullmatch(r"[0-9]{1,4}", limit) and 1 <= int(limit) <= MAX_LIMIT
        ):
            raise ApiError(
                f"invalid query parameter 'limit' {limit!r}: an integer from 1 to {MAX_LIMIT}",
                param="limit",
            )
        after, before = query.get("after_id"), query.get("before_id")
        if after is not None and before is not None:
            raise ApiError("give after_id or before_id, not both", param="before_id")
        lifecycles = tuple(query.getlist("lifecycle[]") + query.getlist("lifecycle"))
        for value in lifecycles:
            if value not in LIFECYCLES:
                raise ApiError(
                    f"invalid query parameter 'lifecycle' {value!r}: one of "
                    f"{', '.join(LIFECYCLES)}",
                    param="lifecycle",
                )
        return cls(
            int(limit) if limit is not None else DEFAULT_LIMIT,
            after,
            before,
            lifecycles or cls.lifecycles,
        )


def page(cards: Sequence[replies.ModelCard], query: PageQuery) -> AnthropicModelList:
    """The page of ``cards`` (in their order) that ``query`` asks for; a cursor that names
    no listed model is a 400."""
    models = [AnthropicModel.of(c) for c in cards] if "active" in query.lifecycles else []
    ids = [m.id for m in models]
    cursor = query.after_id if query.after_id is not None else query.before_id
    if cursor is not None and cursor not in ids:
        name = "after_id" if query.after_id is not None else "before_id"
        raise ApiError(
            f"invalid query parameter {name!r}: no model {cursor!r} in the list", param=name
        )
    if query.before_id is not None:
        end = ids.index(query.before_id)
        start = max(0, end - query.limit)
        has_more = start > 0
    else:
        start = ids.index(query.after_id) + 1 if query.after_id is not None else 0
        end = start + query.limit
        has_more = end < len(models)
    data = models[start:end]
    return AnthropicModelList(
        data=data,
        has_more=has_more,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
    )


def _param(
    name: str, where: Literal["query", "header"], description: str, schema: JsonValue
) -> dict[str, JsonValue]:
    return {
        "name": name,
        "in": where,
        "required": False,
        "description": description,
        "schema": schema,
    }


# The OpenAPI parameters of the Anthropic shape; apidoc documents an operation that takes
# HEADER as answering its errors in either API's shape.
HEADER = _param(
    ANTHROPIC_VERSION,
    "header",
    "Sent by Anthropic clients: the answer (and any error) is in Anthropic's shape",
    {"type": "string"},
)
LIST_PARAMETERS = (
    HEADER,
    _param(
        "limit",
        "query",
        "Models on a page (Anthropic's shape only)",
        {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
    ),
    _param(
        "after_id",
        "query",
        "The page after this model (Anthropic's shape only)",
        {"type": "string"},
    ),
    _param(
        "before_id",
        "query",
        "The page before this model (Anthropic's shape only); not with `after_id`",
        {"type": "string"},
    ),
    {
        **_param(
            "lifecycle[]",
            "query",
            "Models in these lifecycle stages (Anthropic's "
            "shape only; lemoncore's are all `active`)",
            {"type": "array", "items": {"type": "string", "enum": list(LIFECYCLES)}},
        ),
        "style": "form",
        "explode": True,
    },
)
