"""Serving: from a request for a model to a running engine and back.

:mod:`~lemoncore.serving.router` sequences a load: :mod:`~lemoncore.serving.facts` gathers
facts for the pure :mod:`~lemoncore.serving.planner` (options, backend, the plugins'
answers, and the evictions :mod:`~lemoncore.serving.eviction` decides), it checks what it
may not do (:mod:`~lemoncore.serving.refusals`, :mod:`~lemoncore.serving.pins`), lets
:mod:`~lemoncore.serving.admission` refuse or queue, and has
:mod:`~lemoncore.serving.launcher` carry the plan out (RPC workers checked by
:mod:`~lemoncore.serving.workers`, evictions by :mod:`~lemoncore.serving.fleet`) and start a
:class:`~lemoncore.serving.server.LoadedServer`; loads outlive their callers
(:mod:`~lemoncore.serving.pending`) and idle servers are unloaded
(:mod:`~lemoncore.serving.idle`). :mod:`~lemoncore.serving.forwarding` is the one path a
request takes to its engine (retry), returning an :mod:`~lemoncore.serving.answer` that
records its outcome once, whoever relays it (:mod:`~lemoncore.serving.proxy`, a
translation, a plugin through the gateway). May import the plugin-facing modules,
:mod:`lemoncore.installs`, the plugin host, models and settings; never the HTTP API or
the CLI (``tests/test_layout.py``).
"""
