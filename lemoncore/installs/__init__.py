"""Installs: whether a backend can run here and where it lives.

:mod:`~lemoncore.installs.backends` holds each backend's state (computed by
:mod:`~lemoncore.installs.assess`, as :mod:`~lemoncore.installs.backend_status` data),
caches it for planning, installs and uninstalls; :mod:`~lemoncore.installs.install`
downloads, verifies and commits pinned artifacts atomically, and
:mod:`~lemoncore.installs.record` reads and writes what an install records;
:mod:`~lemoncore.installs.rocm` and :mod:`~lemoncore.installs.rocm_runtime` choose and
record the ROCm runtime; :mod:`~lemoncore.installs.refresh` asks publishers for newer pins
and records those accepted. May import the plugin-facing modules, the plugin host and
settings; never serving, the HTTP API or the CLI (``tests/test_layout.py``).
"""
