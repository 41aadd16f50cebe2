"""Lock data is checked by its schema: a malformed lock names the file and the field."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lemoncore.installs import refresh
from lemoncore.launch import Artifact
from lemoncore.lock import Lock, LockError, Pin
from lemoncore.trust import Trusted

ENTRY = {
    "version": "b1",
    "platforms": {
        "linux-x86_64": [
            {"url": "https://e.example/{version}.zip", "sha256": None, "provenance": "none yet"}
        ]
    },
}


def test_a_lock_merges_per_backend_and_fills_trusted_hashes() -> None:
    lock = Lock()
    lock.merge({"_comment": "ignored", "backends": {"r": {"a": ENTRY, "b": ENTRY}}}, "one")
    lock.merge({"backends": {"r": {"b": {**ENTRY, "version": "b2"}}}}, "two")
    assert lock.backend_pin("r", "a", "linux-x86_64").version == "b1"
    assert lock.backend_pin("r", "b", "linux-x86_64").version == "b2"
    assert lock.backend_pin("r", "a", "windows-x86_64") is None
    lock.adopt([Trusted("r:a", "b1", "https://e.example/b1.zip", "a" * 64, 3)])
    [artifact] = lock.backend_pin("r", "a", "linux-x86_64").artifacts
    assert artifact.sha256 == "a" * 64 and artifact.url == "https://e.example/b1.zip"


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"backends": {"r": {"a": {**ENTRY, "version": 7}}}}, "backends.r.a.version"),
        (
            {
                "backends": {
                    "r": {
                        "a": {
                            "version": "1",
                            "platforms": {"linux-x86_64": [{"url": "u", "sha256": "ABC"}]},
                        }
                    }
                }
            },
            "backends.r.a.platforms.linux-x86_64.0.sha256",
        ),
        ({"backend": {}}, "backend: Extra inputs are not permitted"),
        ({"runtimes": {"therock": {"version": "1"}}}, "runtimes.therock.platforms"),
    ],
)
def test_a_malformed_lock_names_the_source_and_the_field(
    data: dict[str, object], where: str
) -> None:
    with pytest.raises(LockError, match=r"lock data from admin\.json is malformed") as refused:
        Lock().merge(data, "admin.json")
    assert where in str(refused.value)


def test_comments_are_ignored_at_any_level() -> None:
    lock = Lock()
    lock.merge(
        {
            "backends": {
                "_comment": "x",
                "r": {
                    "a": {
                        **ENTRY,
                        "_note": "pinned by hand",
                        "platforms": {"linux-x86_64": [{"url": "u", "_why": "y"}]},
                    }
                },
            }
        },
        "admin.json",
    )
    assert lock.backend_pin("r", "a", "linux-x86_64") is not None


def test_accepted_refreshes_are_saved_as_a_lock_keeping_other_entries(tmp_path: Path) -> None:
    path, sha = tmp_path / refresh.REFRESH_FILE, "c" * 64
    old = Artifact("docker://r/i:1", None, extract=False)
    new = replace(old, url=f"docker://r/i:1@sha256:{sha}", sha256=sha, provenance="asked")
    refresh.save(
        path,
        [
            refresh.Refresh("rec:a", "1", "linux-x86_64", old, new),
            refresh.Refresh("rec:b", "1", "linux-x86_64", old, new),
        ],
    )
    refresh.save(path, [refresh.Refresh("rec:a", "2", "windows-x86_64", old, new)])
    saved = json.loads(path.read_text())
    assert set(saved) == {"backends"}
    assert saved["backends"]["rec"]["a"]["version"] == "2"
    [pinned] = saved["backends"]["rec"]["a"]["platforms"]["linux-x86_64"]
    assert pinned["url"] == new.url and pinned["extract"] is False
    assert pinned["provenance"].startswith("refreshed on ")
    assert pinned["provenance"].endswith(": asked (was unpinned)")
    lock = Lock()
    lock.merge(saved, str(path))
    assert lock.backend_pin("rec", "b", "linux-x86_64") == Pin(
        "1", (replace(new, provenance=pinned["provenance"]),)
    )
    assert lock.backend_pin("rec", "a", "windows-x86_64") is not None
