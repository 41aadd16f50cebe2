"""Promotion and demotion rules over evidence: a table, no processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemoncore.recipes import Tier
from lemoncore.tiers import Evidence, assess, claims

READY = Evidence(
    platforms=("linux-x86_64",),
    conformance=("linux-x86_64",),
    ci_row=True,
    maintainer="someone",
    open_critical=0,
    releases_clean=3,
    pin_refreshable=True,
)


@pytest.mark.parametrize(
    ("tier", "evidence", "verdict"),
    [
        (Tier.EXPERIMENTAL, READY, "promote to community"),
        (Tier.COMMUNITY, READY, "promote to core (needs a core grant)"),
        (Tier.CORE, READY, "keep"),
        (Tier.COMMUNITY, Evidence(**{**READY.__dict__, "releases_clean": 1}), "keep"),
        (Tier.EXPERIMENTAL, Evidence(**{**READY.__dict__, "maintainer": ""}), "keep"),
        (Tier.CORE, Evidence(**{**READY.__dict__, "pin_refreshable": False}), "demote"),
        (
            Tier.COMMUNITY,
            Evidence(**{**READY.__dict__, "platforms": ("linux-x86_64", "windows-x86_64")}),
            "demote",
        ),  # the kit fails on a declared platform
        (
            Tier.EXPERIMENTAL,
            Evidence(**{**READY.__dict__, "pin_refreshable": False}),
            "propose removal",
        ),
        (Tier.COMMUNITY, None, "unassessed: no evidence in lemoncore's registry"),
    ],
)
def test_rules(tier: Tier, evidence: Evidence | None, verdict: str) -> None:
    assert assess(tier, evidence).verdict == verdict


def test_a_plugin_states_its_evidence_in_its_package_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Project-URL: Conformance, …`` and ``CI, …`` and the maintainer are read as the
    plugin's claim; the registry's evidence alone decides the verdict."""
    info = tmp_path / "lemon_plugin_thirdparty-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: lemon-plugin-thirdparty\nVersion: 1.0\n"
        "Maintainer-email: Ada <ada@example.org>\n"
        "Project-URL: Homepage, https://example.org\n"
        "Project-URL: CI, https://ci.example.org/lemon-plugin-thirdparty\n"
        "Project-URL: conformance, https://ci.example.org/runs/42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert claims("lemon-plugin-thirdparty") == {
        "ci": "https://ci.example.org/lemon-plugin-thirdparty",
        "conformance": "https://ci.example.org/runs/42",
        "maintainer": "Ada <ada@example.org>",
    }
    assert claims("lemon-plugin-not-installed") == {}
    assert assess(Tier.EXPERIMENTAL, None).verdict.startswith("unassessed")
