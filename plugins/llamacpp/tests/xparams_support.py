"""What the xparams and xserver tests share: the API key and alias the server is started
with, the arguments lemoncore's launch passes before the user's flags, and sample command
lines for each tuning flag."""

from __future__ import annotations

from lemoncore.plugin import ArgFlag

KEY = "test-key"
ALIAS = "smol"
# What lemoncore's launch passes before the user's flags (launch.server_args).
BASE = f"--port 1 --host 127.0.0.1 --ctx-size 1024 --jinja --metrics --alias {ALIAS}".split()


def samples(flag: ArgFlag) -> list[list[str]]:
    """Command lines using ``flag`` with each kind of value it takes."""
    kinds: dict[str, list[list[str]]] = {
        "switch": [[]],
        "int": [["2"]],
        "float": [["1.5"]],
        "floats": [["3,1"]],
    }
    values = kinds.get(flag.takes, [["CUDA0"]] if flag.takes == "names" else [])
    values += [[word] for word in flag.choices]
    return [[name, *value] for name in flag.names for value in values]
