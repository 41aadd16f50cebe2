from __future__ import annotations

from lemoncore.options import resolve_options


def test_higher_layers_win_and_none_means_unset() -> None:
    resolved = resolve_options(
        {"ctx_size": 4096, "llamacpp_args": ""},  # recipe defaults
        {"ctx_size": 8192},  # user's recipe section
        {"llamacpp_args": "--threads 2"},  # catalogue
        {"ctx_size": None, "backend": "cpu"},  # request
    )
    assert resolved == {"ctx_size": 8192, "llamacpp_args": "--threads 2", "backend": "cpu"}
