"""Tiers as code: who may claim ``core``, and the rules that promote or demote a backend.

Rules (``assess``), over the evidence in lemoncore's tier registry
(``lemoncore/data/tiers.json``):

- **experimental → community** when the backend passes the conformance kit on every
  platform it declares, has a CI row running the kit, and has a named maintainer.
- **community → core** when, in addition, no critical issue has been open for
  ``STABLE_RELEASES`` releases and its pin can be refreshed; core is granted only by
  lemoncore's registry (``core_grants``), never by a plugin's own claim.
- **demote one tier** when the registry records a failure (``failed``): the kit failing
  on a declared platform it used to pass, or a pin that can no longer be refreshed; an
  experimental backend that would be demoted is proposed for removal. Evidence not yet
  recorded (a platform the kit has not run on, a pin not yet shown refreshable) is not a
  failure: a core backend missing some reads ``keep (core by grant, evidence incomplete)``.

A plugin may state its own evidence in its package metadata (:func:`claims`); it is shown
as the plugin's claim, beside the registry's evidence, and never changes a verdict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any

from lemoncore.recipes import Tier

STABLE_RELEASES = 3


@dataclass(frozen=True)
class Evidence:
    platforms: tuple[str, ...] = ()
    conformance: tuple[str, ...] = ()  # platforms where the kit passes
    ci_row: bool = False
    maintainer: str = ""
    open_critical: int = 0
    releases_clean: int = 0
    pin_refreshable: bool = False
    failed: tuple[str, ...] = ()  # criteria shown failing (the kit, the pin), not just unshown


@dataclass(frozen=True)
class Assessment:
    tier: Tier
    criteria: dict[str, bool] = field(default_factory=dict)
    verdict: str = "keep"


CRITERIA = {
    "conformance": "passes the conformance kit on every declared platform",
    "ci_row": "has a CI row that runs the kit",
    "maintainer": "has a named maintainer",
    "stable": f"no open critical issue for {STABLE_RELEASES} releases",
    "pin": "its pin can be refreshed",
}


def assess(tier: Tier, evidence: Evidence | None) -> Assessment:
    if evidence is None:
        return Assessment(
            tier, dict.fromkeys(CRITERIA, False), "unassessed: no evidence in lemoncore's registry"
        )
    met = {
        "conformance": bool(evidence.platforms)
        and set(evidence.platforms) <= set(evidence.conformance),
        "ci_row": evidence.ci_row,
        "maintainer": bool(evidence.maintainer),
        "stable": evidence.open_critical == 0 and evidence.releases_clean >= STABLE_RELEASES,
        "pin": evidence.pin_refreshable,
    }
    if evidence.failed:
        demotion = "propose removal" if tier is Tier.EXPERIMENTAL else "demote"
        verdict = f"{demotion} (failed: {', '.join(evidence.failed)})"
    elif tier is Tier.EXPERIMENTAL and met["conformance"] and met["ci_row"] and met["maintainer"]:
        verdict = "promote to community"
    elif tier is Tier.COMMUNITY and all(met.values()):
        verdict = "promote to core (needs a core grant)"
    elif tier is Tier.CORE and not all(met.values()):
        verdict = "keep (core by grant, evidence incomplete)"
    else:
        verdict = "keep"
    return Assessment(tier, met, verdict)


@cache
def registry() -> Mapping[str, Any]:
    data: Mapping[str, Any] = json.loads(files("lemoncore").joinpath("data/tiers.json").read_text())
    return data


def core_granted(distribution: str, backend: str) -> bool:
    return backend in registry()["core_grants"].get(distribution, [])


def evidence_for(backend: str) -> Evidence | None:
    raw = registry()["evidence"].get(backend)
    if raw is None:
        return None
    return Evidence(
        tuple(raw.get("platforms", ())),
        tuple(raw.get("conformance", ())),
        bool(raw.get("ci_row")),
        str(raw.get("maintainer", "")),
        int(raw.get("open_critical", 0)),
        int(raw.get("releases_clean", 0)),
        bool(raw.get("pin_refreshable")),
        tuple(raw.get("failed", ())),
    )


# Project-URL labels a plugin's package uses to state its evidence (case-insensitive).
CLAIM_LABELS = {"conformance": "conformance", "ci": "ci"}


def claims(distribution: str) -> dict[str, str]:
    """What a plugin's distribution says of itself: ``Project-URL`` entries labelled
    ``Conformance`` (a conformance run's result) and ``CI`` (the CI that runs the kit),
    and its maintainer (``Maintainer-email``, ``Maintainer``, else ``Author-email``).
    Empty when the distribution is not installed or says nothing."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        meta = metadata(distribution)
    except PackageNotFoundError:
        return {}
    found: dict[str, str] = {}
    for entry in meta.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if (key := CLAIM_LABELS.get(label.strip().lower())) is not None:
            found[key] = url.strip()
    maintainer = next(
        (
            v
            for k in ("Maintainer-email", "Maintainer", "Author-email")
            for v in meta.get_all(k) or ()
            if v
        ),
        None,
    )
    if maintainer:
        found["maintainer"] = maintainer
    return found


@dataclass(frozen=True)
class ReportEvidence:
    """What a ``lemon validate`` report shows toward the criteria for its backend: per
    criterion, what it shows (or why it cannot). It is shown beside the verdict, for
    whoever updates lemoncore's registry; it never changes a verdict by itself."""

    backend: str
    date: str
    platform: str  # e.g. linux-x86_64
    families: tuple[str, ...]  # GPU families (or names) of the host
    hardware: bool  # every check passed, none on a stand-in
    versions: dict[str, str]
    shows: dict[str, str]


_ARCH = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "arm64", "aarch64": "arm64"}
_KIT_GROUP = "conformance"


def evidence_from_report(data: Mapping[str, Any]) -> ReportEvidence:
    """Read a validation report (``lemoncore.validation.report.from_json``'s data)."""
    host, versions = data.get("host") or {}, data.get("versions") or {}
    backend = str(data.get("backend", ""))
    machine = str(host.get("machine", "")).lower()
    platform = f"{host.get('os', '?')}-{_ARCH.get(machine, machine or '?')}"
    gpus = [d for d in host.get("devices") or () if d.get("kind") != "cpu"]
    families = tuple(sorted({str(d.get("family") or d.get("name")) for d in gpus})) or ("cpu",)
    hardware = bool(data.get("hardware_evidence"))
    kit = [c for c in data.get("checks") or () if c.get("group") == _KIT_GROUP]
    failed = [c["name"] for c in kit if c.get("status") == "failed"]
    standin = list(data.get("standin") or ())
    if standin:
        conformance = "not evidence: it ran against a stand-in (" + "; ".join(standin) + ")"
    elif failed or not kit:
        conformance = f"the kit failed on {platform}: {', '.join(failed) or 'not run'}"
    else:
        conformance = (
            f"the kit passed on {platform} hardware ({', '.join(families)}) on "
            f"{data.get('created', '?')}" + ("" if hardware else ", but other checks failed")
        )
    owner = str((data.get("backend_info") or {}).get("owner plugin", ""))
    plugin = (versions.get("plugins") or {}).get(owner, {})
    return ReportEvidence(
        backend,
        str(data.get("created", "")),
        platform,
        families,
        hardware,
        {
            "lemoncore": str(versions.get("lemoncore", "")),
            "plugin": f"{owner} {plugin.get('version', '')}".strip(),
            "backend": str((data.get("backend_info") or {}).get("version", "")),
        },
        {
            "conformance": conformance,
            **dict.fromkeys(
                ("ci_row", "maintainer", "stable", "pin"), "a validation report cannot show this"
            ),
        },
    )
