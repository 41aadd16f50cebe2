"""The hook markers: ``hookimpl`` decorates a plugin's implementations."""

from __future__ import annotations

import pluggy

PROJECT = "lemon"
hookspec = pluggy.HookspecMarker(PROJECT)
# Marks a hook implementation: ``@hookimpl`` on a function or method named after the hook
# (pluggy's options too: ``@hookimpl(trylast=True)``). Hooks are in docs/hooks.md.
hookimpl = pluggy.HookimplMarker(PROJECT)
