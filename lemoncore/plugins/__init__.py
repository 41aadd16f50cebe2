"""Plugins: discovered, loaded and vetted one at a time, their contributions merged into
one registry, their hooks called through typed methods. By part:
:mod:`~lemoncore.plugins.host` (``PluginHost``: loading and the typed hook calls),
:mod:`~lemoncore.plugins.collect` (vetting one plugin's hooks and contributions) and
:mod:`~lemoncore.plugins.registry` (load records, the registry and its merge rules); every
public name is importable from here.
"""

from __future__ import annotations

from lemoncore.errors import PluginError as PluginError  # re-exported
from lemoncore.plugins.host import ENTRY_POINT_GROUP, PluginHost, load_plugins
from lemoncore.plugins.registry import PluginRecord, PluginRecordJson, Registry

__all__ = [
    "ENTRY_POINT_GROUP",
    "PluginError",
    "PluginHost",
    "PluginRecord",
    "PluginRecordJson",
    "Registry",
    "load_plugins",
]
