"""Checking a backend: the conformance kit (:mod:`~.suite` the checks every backend
passes, :mod:`~.chatsuite` a chat backend's, :mod:`~.target` what they run against,
:mod:`~.declared` what the backend declares and its sample requests, :mod:`~.answers`
requests that fail quoting the answer, :mod:`~.intruder` the owner-dispatch plugin), how
checks run and are counted (:mod:`~.kit`, also for a plugin's field checks), and
``lemon validate BACKEND``, which runs the kit, the backend's field checks and a short
benchmark on the user's machine with the real installed backend on its own server
(:mod:`~.run` the orchestration, :mod:`~.options`, :mod:`~.session` its steps,
:mod:`~.benchmark` for chat, :mod:`~.endpointbench` for other endpoints,
:mod:`~.evidence`, :mod:`~.host`, :mod:`~.server`) and writes a shareable report
(:mod:`~.report`, ``docs/validation.md``); nothing is sent anywhere.
Import rule: the CLI imports it lazily (inside its commands), ``lemoncore.testing`` for
the server and ``lemon tiers --evidence`` for the report; plugins never import it directly,
only through its two public faces, :mod:`lemoncore.conformance` (the kit their tests
subclass) and :mod:`lemoncore.fieldchecks` (what a plugin declares; plugin-facing and kept
light, so it stays outside this package, which imports it, never the reverse).
"""
