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


def _shipped(tag_sha: str | None, version: str = "1") -> Lock:
    """A shipped pin of rec:a for two platforms (the second never refreshed)."""
    lock = Lock()
    pinned = {"url": "docker://r/i:1", "sha256": tag_sha, "extract": False}
    lock.merge(
        {
            "backends": {
                "rec": {
                    "a": {
                        "version": version,
                        "platforms": {"linux-x86_64": [pinned], "linux-arm64": [pinned]},
                    }
                }
            }
        },
        "plugin",
    )
    return lock


def _sha(lock: Lock, platform: str) -> str | None:
    pin = lock.backend_pin("rec", "a", platform)
    assert pin is not None
    return pin.artifacts[0].sha256


def test_a_refresh_applies_until_a_newer_pin_is_shipped(tmp_path: Path) -> None:
    path, old_sha, new_sha, shipped_sha = (
        tmp_path / refresh.REFRESH_FILE,
        "a" * 64,
        "b" * 64,
        "d" * 64,
    )
    old = Artifact("docker://r/i:1", old_sha, extract=False)
    new = replace(old, url=f"docker://r/i:1@sha256:{new_sha}", sha256=new_sha, provenance="asked")
    refresh.save(path, [refresh.Refresh("rec:a", "1", "linux-x86_64", old, new)])
    [saved] = json.loads(path.read_text())["backends"]["rec"]["a"]["platforms"]["linux-x86_64"]
    assert saved["replaces"] == {"version": "1", "url": old.url, "sha256": old_sha}

    lock = _shipped(old_sha)  # still the pin the refresh replaced: the refresh wins
    assert refresh.apply(lock, refresh.read(path)) == []
    assert _sha(lock, "linux-x86_64") == new_sha
    assert _sha(lock, "linux-arm64") == old_sha

    lock = _shipped(shipped_sha)  # a newer plugin shipped another pin: it wins
    [said] = refresh.apply(lock, refresh.read(path))
    assert said == (
        "rec:a on linux-x86_64: refresh left out: a newer pin was shipped since (1, docker://r/i:1)"
    )
    assert _sha(lock, "linux-x86_64") == shipped_sha
    lock = _shipped(old_sha, version="2")  # a new version shipped
    assert "a newer pin was shipped since (2," in refresh.apply(lock, refresh.read(path))[0]
    assert "no longer pinned" in refresh.apply(Lock(), refresh.read(path))[0]


def test_a_refresh_of_a_refresh_still_names_the_shipped_pin(tmp_path: Path) -> None:
    path, shas = tmp_path / refresh.REFRESH_FILE, ["a" * 64, "b" * 64, "c" * 64]
    pins = [Artifact(f"docker://r/i:1@sha256:{s}", s, extract=False) for s in shas]
    refresh.save(path, [refresh.Refresh("rec:a", "1", "linux-x86_64", pins[0], pins[1])])
    refresh.save(path, [refresh.Refresh("rec:a", "1", "linux-x86_64", pins[1], pins[2])])
    [saved] = json.loads(path.read_text())["backends"]["rec"]["a"]["platforms"]["linux-x86_64"]
    assert (saved["sha256"], saved["replaces"]["sha256"]) == (shas[2], shas[0])


def test_a_refresh_saved_before_replaces_was_recorded_applies_while_the_version_holds(
    tmp_path: Path,
) -> None:
    path, sha = tmp_path / refresh.REFRESH_FILE, "e" * 64
    pinned = {"url": f"docker://r/i:1@sha256:{sha}", "sha256": sha, "extract": False}
    entry = {"version": "1", "platforms": {"linux-x86_64": [pinned]}}
    path.write_text(json.dumps({"backends": {"rec": {"a": entry}}}))
    lock = _shipped(None)
    assert refresh.apply(lock, refresh.read(path)) == []
    assert _sha(lock, "linux-x86_64") == sha
    lock = _shipped(None, version="2")
    assert "the pinned version is now 2" in refresh.apply(lock, refresh.read(path))[0]


def test_an_unreadable_refresh_file_names_itself(tmp_path: Path) -> None:
    path = tmp_path / refresh.REFRESH_FILE
    assert refresh.read(path).backends == {}
    path.write_text("{not json")
    with pytest.raises(LockError, match=str(path)):
        refresh.read(path)
