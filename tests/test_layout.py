"""The package layout is the architecture: what each part may import.

- the plugin-facing modules (what a plugin imports: errors, recipes, launch, hookspecs,
  hosts, lock, options, supervisor, exits, ...) import only each other;
- ``lemoncore.installs`` adds the plugin host and settings, never serving;
- ``lemoncore.serving`` adds installs, models, the plugin host and settings;
- neither imports the HTTP API, the CLI, the app or the composed core;
- the HTTP API never imports the CLI.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "lemoncore"
PLUGIN_FACING = {
    "errors",
    "recipes",
    "launch",
    "hookspecs",
    "hosts",
    "gpus",
    "lock",
    "trust",
    "jsonfile",
    "options",
    "platforms",
    "supervisor",
    "tiers",
    "defaults",
    "durations",
    "fieldchecks",
    "rpc",
    "exits",
    "cpus",
    "outputlines",
}
ALLOWED = {
    "plugin-facing": PLUGIN_FACING,
    "installs": PLUGIN_FACING | {"installs", "plugins", "settings"},
    "serving": PLUGIN_FACING | {"installs", "serving", "plugins", "settings", "models"},
}


def part(module: str) -> str:
    """``lemoncore.serving.router`` -> ``serving``; ``lemoncore.launch`` -> ``launch``."""
    return module.split(".")[1] if module.count(".") else ""


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= (
                {node.module}
                if node.module != "lemoncore"
                else {f"lemoncore.{a.name}" for a in node.names}
            )
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m.startswith("lemoncore.")}


def test_each_part_imports_only_what_its_layer_allows() -> None:
    wrong = []
    for path in ROOT.rglob("*.py"):
        own = path.relative_to(ROOT).parts[0].removesuffix(".py")
        layer = "plugin-facing" if own in PLUGIN_FACING else own
        used = {part(m) for m in imports(path)} - {own}
        if layer in ALLOWED:
            wrong += [
                f"{path.relative_to(ROOT)} imports lemoncore.{u}"
                for u in sorted(used - ALLOWED[layer])
            ]
        elif layer == "api":
            wrong += [f"{path.relative_to(ROOT)} imports the CLI" for u in used if u == "cli"]
    assert not wrong, "\n".join(wrong)


def test_the_rule_sees_a_violation(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from lemoncore.api.errors import ApiError\nimport lemoncore.cli\n"
        "from lemoncore import app\n"
    )
    assert {part(m) for m in imports(module)} == {"api", "cli", "app"}


def test_the_serving_design_notes_name_the_modules_that_exist() -> None:
    """``serving/DESIGN.md`` names each module of ``lemoncore/serving`` (`name.py`), and
    only modules that exist: the notes cannot drift from the code unnoticed."""
    serving = ROOT / "serving"
    named = set(re.findall(r"`(\w+)\.py`", (serving / "DESIGN.md").read_text()))
    modules = {p.stem for p in serving.glob("*.py")} - {"__init__"}
    assert named - modules == set(), "DESIGN.md names modules that do not exist"
    assert modules - named == set(), "modules DESIGN.md does not describe"
