"""Serving: from a request for a model to a running engine and back.

:mod:`~lemoncore.serving.router` sequences a load: it gathers facts, asks the pure
:mod:`~lemoncore.serving.planner` (options, backend, the plugins' answers, and the
evictions :mod:`~lemoncore.serving.eviction` decides), lets
:mod:`~lemoncore.serving.admission` refuse or queue, has :mod:`~lemoncore.serving.fleet`
evict and :mod:`~lemoncore.serving.launcher` start. :mod:`~lemoncore.serving.forwarding`
is the one path a request takes to its engine (retry, outcomes) and
:mod:`~lemoncore.serving.proxy` relays the answer. May import the plugin-facing modules,
:mod:`lemoncore.installs`, the plugin host, models and settings; never the HTTP API or
the CLI (``tests/test_layout.py``).
"""
