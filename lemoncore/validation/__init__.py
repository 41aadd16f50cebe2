"""Field validation: ``lemon validate BACKEND`` runs the conformance kit, the backend's own
field checks and a short benchmark on the user's machine, with the real installed backend,
and writes a shareable report (``docs/validation.md``).

Modules: :mod:`~lemoncore.fieldchecks` (what a plugin declares: light, imported
by plugins), :mod:`~lemoncore.validation.report` (the report and its rendering),
:mod:`~lemoncore.validation.host` (facts about this machine),
:mod:`~lemoncore.validation.server` (the validation's own server),
:mod:`~lemoncore.validation.kit` (the conformance kit as checks) and
:mod:`~lemoncore.validation.run` (the orchestration). Nothing is sent anywhere.
"""
