"""Promotion and demotion rules over evidence: a table, no processes."""

from __future__ import annotations

import pytest

from lemoncore.recipes import Tier
from lemoncore.tiers import Evidence, assess

READY = Evidence(platforms=("linux-x86_64",), conformance=("linux-x86_64",), ci_row=True,
                 maintainer="someone", open_critical=0, releases_clean=3, pin_refreshable=True)


@pytest.mark.parametrize(
    ("tier", "evidence", "verdict"),
    [
        (Tier.EXPERIMENTAL, READY, "promote to community"),
        (Tier.COMMUNITY, READY, "promote to core (needs a core grant)"),
        (Tier.CORE, READY, "keep"),
        (Tier.COMMUNITY, Evidence(**{**READY.__dict__, "releases_clean": 1}), "keep"),
        (Tier.EXPERIMENTAL, Evidence(**{**READY.__dict__, "maintainer": ""}), "keep"),
        (Tier.CORE, Evidence(**{**READY.__dict__, "pin_refreshable": False}), "demote"),
        (Tier.COMMUNITY, Evidence(**{**READY.__dict__, "platforms": ("linux-x86_64",
                                                                     "windows-x86_64")}),
         "demote"),  # the kit fails on a declared platform
        (Tier.EXPERIMENTAL, Evidence(**{**READY.__dict__, "pin_refreshable": False}),
         "propose removal"),
        (Tier.COMMUNITY, None, "unassessed: no evidence in lemoncore's registry"),
    ],
)
def test_rules(tier: Tier, evidence: Evidence | None, verdict: str) -> None:
    assert assess(tier, evidence).verdict == verdict
