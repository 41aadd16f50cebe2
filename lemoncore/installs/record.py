"""The install record: what an install wrote about itself in ``install.json`` beside the
installed files (the pin it installed, and what a plugin's :class:`~lemoncore.launch.Installer`
returned), read by :func:`read_record` and written by :func:`write_record` only. A record
that differs from the current pin means the install is out of date."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, field_validator

from lemoncore.jsonfile import write_json
from lemoncore.launch import Installed, InstallPlan
from lemoncore.recipes import ModelInfo

RECORD = "install.json"


class RecordedArtifact(BaseModel):
    """One installed download, as pinned."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    url: str
    sha256: str | None = None


class InstallRecord(BaseModel):
    """``version`` and ``artifacts`` are the pin installed; ``result`` (an image ID, say)
    and ``models`` are what an installer returned (``None`` and empty for artifacts the
    core installed). Unknown keys are ignored and a model that no longer parses is
    dropped, so records older or newer than this code still read."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    version: str
    artifacts: tuple[RecordedArtifact, ...] = ()
    result: str | None = None
    models: tuple[ModelInfo, ...] = ()

    @field_validator("models", mode="before")
    @classmethod
    def _parseable(cls, models: object) -> tuple[ModelInfo, ...]:
        kept = []
        for data in models if isinstance(models, list | tuple) else ():
            try:
                kept.append(ModelInfo.model_validate(data))
            except ValueError:
                continue
        return tuple(kept)

    @classmethod
    def of(cls, plan: InstallPlan, installed: Installed | None = None) -> InstallRecord:
        """The record of installing ``plan`` (by the plugin's installer: ``installed``)."""
        return cls(
            version=plan.version,
            artifacts=tuple(RecordedArtifact(url=a.url, sha256=a.sha256) for a in plan.artifacts),
            result=None if installed is None else installed.record,
            models=() if installed is None else installed.models,
        )

    def installs(self, plan: InstallPlan) -> bool:
        """Whether this record is of ``plan``'s pin: the same version and artifacts."""
        return self.version == plan.version and [(a.url, a.sha256) for a in self.artifacts] == [
            (a.url, a.sha256) for a in plan.artifacts
        ]

    def as_json(self) -> dict[str, object]:
        """The file's JSON (what :attr:`~lemoncore.launch.LaunchContext.installed` holds):
        ``result`` and ``models`` only in an installer's record."""
        data: dict[str, object] = {
            "version": self.version,
            "artifacts": [a.model_dump(mode="json") for a in self.artifacts],
        }
        if self.result is not None:
            data["result"] = self.result
            data["models"] = [m.model_dump(mode="json") for m in self.models]
        return data


def read_record(target: Path) -> InstallRecord | None:
    """The record of the install in ``target``; ``None`` when there is none, or it is
    unreadable (a partial or foreign install counts as not installed)."""
    try:
        return InstallRecord.model_validate_json((target / RECORD).read_bytes())
    except (OSError, ValueError):
        return None


def write_record(target: Path, record: InstallRecord) -> None:
    """Write ``record`` into ``target`` atomically (:func:`lemoncore.jsonfile.write_json`)."""
    write_json(target / RECORD, record.as_json())
