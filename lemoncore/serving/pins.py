"""Which models an administrator pinned (:class:`Pins`), and what a caller without
management rights may not do to one (:class:`~lemoncore.serving.refusals.PinnedModel`).
A pin is set or cleared by a load that says so, kept by a reload and by a start after a
crash, and dropped by an unload or unload-all. Plain state, no I/O: the router changes it
under its load lock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lemoncore.serving.planner import LoadPlan
from lemoncore.serving.refusals import PinnedModel


class Pins:
    """The pinned model names (``name in pins``)."""

    def __init__(self) -> None:
        self._names: set[str] = set()

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def set(self, name: str, pinned: bool) -> None:
        (self._names.add if pinned else self._names.discard)(name)

    def clear(self) -> None:
        self._names.clear()

    def for_load(
        self,
        found: LoadPlan,
        running: bool,
        pinned: bool | None,
        request: Mapping[str, Any] | None,
        manage: bool,
    ) -> bool:
        """Whether a server ``found`` starts is pinned: ``pinned``, else as the model is
        now (a reload, or a start after a crash, keeps its pin). Without ``manage``, a
        pinned model is neither reloaded with other options, unpinned (``pinned`` False),
        nor started (not ``running``: after a crash) with the request's options:
        :class:`~lemoncore.serving.refusals.PinnedModel`."""
        name = found.model.name
        if (
            not manage
            and name in self._names
            and (found.reload or pinned is False or (not running and request))
        ):
            raise PinnedModel(name, "reload with other options or unpin")
        return name in self._names if pinned is None else pinned

    def unload(self, name: str, manage: bool) -> None:
        """Drop ``name``'s pin for its unload; without ``manage``, a pinned model is not
        unloaded: :class:`~lemoncore.serving.refusals.PinnedModel`."""
        if not manage and name in self._names:
            raise PinnedModel(name, "unload")
        self._names.discard(name)
