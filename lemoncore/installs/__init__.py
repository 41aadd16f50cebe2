"""Installs: whether a backend can run here and where it lives.

:mod:`~lemoncore.installs.backends` computes each backend's state
(:mod:`~lemoncore.installs.backend_status`), caches it for planning, installs and
uninstalls; :mod:`~lemoncore.installs.install` downloads, verifies and commits pinned
artifacts atomically; :mod:`~lemoncore.installs.rocm` and
:mod:`~lemoncore.installs.rocm_runtime` choose and record the ROCm runtime;
:mod:`~lemoncore.installs.refresh` records pins refreshed from their publishers. May
import the plugin-facing modules, the plugin host and settings; never serving, the HTTP
API or the CLI (``tests/test_layout.py``).
"""
