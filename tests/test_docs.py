"""Every hook is documented (name, arguments, example) and exercised by a test."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from lemoncore import hookspecs

ROOT = Path(__file__).resolve().parents[1]
HOOKS = {name: fn for name, fn in vars(hookspecs).items()
         if callable(fn) and hasattr(fn, "lemon_spec")}
TEST_TEXT = "\n".join(p.read_text() for pattern in ("tests/*.py", "plugins/*/tests/*.py",
                                                    "examples/*/tests/*.py")
                      for p in ROOT.glob(pattern))
PLUGIN_TEXT = TEST_TEXT + "\n".join(p.read_text() for p in ROOT.glob("plugins/*/*/*.py"))
DOC = (ROOT / "docs/hooks.md").read_text()


def test_the_hook_list_is_what_lemoncore_declares() -> None:
    assert set(HOOKS) == {"register_recipes", "register_backends", "register_models",
                          "register_lock", "startup_tasks", "effective_device",
                          "effective_is_amd_gpu", "slot_policy", "install", "preflight",
                          "launch", "normalize_request", "refresher", "migrations"}


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_hook_is_documented_with_its_arguments_and_an_example(name: str) -> None:
    args = ", ".join(inspect.signature(HOOKS[name]).parameters)
    heading = f"## `{name}({args})`"
    assert heading in DOC, f"docs/hooks.md lacks {heading}"
    section = DOC.split(heading, 1)[1].split("\n## ", 1)[0]
    assert "Returns" in section and "```python" in section and f"def {name}(" in section


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_hook_is_implemented_by_some_tested_plugin(name: str) -> None:
    assert re.search(rf"def {name}\(", PLUGIN_TEXT), f"no plugin or test implements {name}"
