"""Promotion and demotion rules over evidence: a table, no processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from lemoncore import tiers
from lemoncore.recipes import Tier
from lemoncore.tiers import Evidence, assess, claims, evidence_for

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
        # evidence not yet shown is no failure: no demotion without a recorded one
        (
            Tier.CORE,
            Evidence(**{**READY.__dict__, "pin_refreshable": False}),
            "keep (core by grant, evidence incomplete)",
        ),
        (
            Tier.CORE,
            Evidence(platforms=("linux-x86_64", "windows-x86_64"), maintainer="team"),
            "keep (core by grant, evidence incomplete)",
        ),  # the kit has not run on windows: not shown failing there
        (
            Tier.COMMUNITY,
            Evidence(**{**READY.__dict__, "platforms": ("linux-x86_64", "windows-x86_64")}),
            "keep",
        ),
        (
            Tier.EXPERIMENTAL,
            Evidence(**{**READY.__dict__, "pin_refreshable": False}),
            "promote to community",  # which needs no pin
        ),
        # a recorded failure demotes, naming it
        (Tier.CORE, Evidence(**{**READY.__dict__, "failed": ("pin",)}), "demote (failed: pin)"),
        (
            Tier.COMMUNITY,
            Evidence(**{**READY.__dict__, "failed": ("conformance",)}),
            "demote (failed: conformance)",
        ),
        (
            Tier.EXPERIMENTAL,
            Evidence(**{**READY.__dict__, "failed": ("conformance", "pin")}),
            "propose removal (failed: conformance, pin)",
        ),
        (Tier.COMMUNITY, None, "unassessed: no evidence in lemoncore's registry"),
        (Tier.CORE, None, "unassessed: no evidence in lemoncore's registry"),
    ],
)
def test_rules(tier: Tier, evidence: Evidence | None, verdict: str) -> None:
    assert assess(tier, evidence).verdict == verdict


def test_the_registry_records_failures_apart_from_evidence_not_yet_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = {"platforms": ["linux-x86_64"], "conformance": ["linux-x86_64"], "ci_row": True}
    evidence = {"r:shown": entry, "r:failed": {**entry, "failed": ["pin"]}}
    monkeypatch.setattr(tiers, "registry", lambda: {"core_grants": {}, "evidence": evidence})
    assert evidence_for("r:shown") == Evidence(("linux-x86_64",), ("linux-x86_64",), True)
    failed = evidence_for("r:failed")
    assert failed is not None and failed.failed == ("pin",)
    assert assess(Tier.CORE, failed).verdict == "demote (failed: pin)"


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
