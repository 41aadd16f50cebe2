"""The hook markers: ``hookimpl`` decorates a plugin's implementations."""

from __future__ import annotations

import pluggy

PROJECT = "lemon"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
