"""Declared, typed, scoped options: pure checks, no processes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lemoncore.hosts import HostDevice, HostInfo
from lemoncore.installs.backends import Backends
from lemoncore.lock import Lock
from lemoncore.options import Layer, OptionError, check, check_args, declared, resolve, selector
from lemoncore.plugins import PluginHost
from lemoncore.recipes import (
    ArgFlag,
    Backend,
    DeviceKind,
    OptionScope,
    OptionSpec,
    Recipe,
    SupportRow,
)
from lemoncore.settings import Settings

ROW = SupportRow(os=frozenset({"linux"}), devices={DeviceKind.CPU: frozenset()})
FLAGS = (
    ArgFlag(names=("-t", "--threads"), takes="int"),
    ArgFlag(names=("-ngl", "--gpu-layers"), takes="int", choices=("auto", "all")),
    ArgFlag(names=("-fa", "--flash-attn"), takes="choice", choices=("on", "off")),
    ArgFlag(names=("--temp",), takes="float"),
    ArgFlag(names=("--mlock",)),
    ArgFlag(names=("-ts", "--tensor-split"), takes="floats"),
)
RECIPE = Recipe(
    name="engine",
    display_name="Engine",
    options=(
        OptionSpec(name="ctx_size", default=4096, minimum=0, maximum=65536),
        OptionSpec(name="engine_args", type="args", default="", flags=FLAGS),
        OptionSpec(name="mode", default="fast", choices=("fast", "exact")),
        OptionSpec(name="system_bin", scope=OptionScope.ADMIN),
    ),
    backends=(
        Backend(name="cpu", support=(ROW,)),
        Backend(
            name="boxed",
            support=(ROW,),
            options=(OptionSpec(name="trusted", type="list", scope=OptionScope.ADMIN),),
        ),
    ),
)
CPU, BOXED = RECIPE.backends
REQUEST = Layer("in the request", {})


def request(**values: object) -> Layer:
    return Layer("in the request", values)


def test_types_follow_the_default_and_args_get_an_admin_allow_option() -> None:
    specs = {s.name: s for s in declared(RECIPE, CPU)}
    assert specs["ctx_size"].type == "int" and specs["mode"].type == "str"
    assert specs["engine_args_allow"].type == "list"
    assert specs["engine_args_allow"].scope is OptionScope.ADMIN
    assert "trusted" not in specs and "trusted" in {s.name for s in declared(RECIPE)}


def test_defaults_config_model_saved_and_request_resolve_in_order() -> None:
    options, admin = resolve(
        declared(RECIPE, CPU),
        {"ctx_size": 8192, "system_bin": "/opt/llama-server"},
        [
            Layer("model", {"mode": "exact", "ctx_size": 2048}),
            Layer("saved", {}),
            request(ctx_size=None, engine_args="--threads 2"),
        ],
        "recipes.engine",
    )
    assert options == {"ctx_size": 2048, "engine_args": "--threads 2", "mode": "exact"}
    assert admin == {"system_bin": "/opt/llama-server"}


def test_the_configuration_converts_and_requests_are_strict() -> None:
    config = Layer("in recipes.engine", {"ctx_size": "8192"})  # the environment's strings
    assert check(declared(RECIPE), config, admin=True) == {"ctx_size": 8192}
    for value in ("8192", True, 8192.0):
        with pytest.raises(OptionError, match="valid integer"):
            check(declared(RECIPE, CPU), request(ctx_size=value), admin=False)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"ctx_sise": 4096},
            "unknown option 'ctx_sise' in the request; valid options: ctx_size, engine_args, mode",
        ),
        (
            {"system_bin": "/bin/sh"},
            "administrator setting and cannot be set in the request; set recipes.engine.system_bin",
        ),
        ({"engine_args_allow": ["--log-file"]}, "administrator setting"),
        ({"trusted": ["evil.example/x"]}, "unknown option 'trusted'"),  # another backend's
        ({"ctx_size": 10**9}, "less than or equal to 65536"),
        ({"ctx_size": "big"}, "valid integer"),
        ({"ctx_size": 4096.5}, "valid integer"),
        ({"mode": "turbo"}, "'fast' or 'exact'"),
    ],
)
def test_bad_request_options_are_refused_naming_the_fix(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(")) as caught:
        check(declared(RECIPE, CPU), request(**values), admin=False, section="recipes.engine")
    assert caught.value.status == 400 and caught.value.param == next(iter(values))


def test_a_bad_configuration_is_a_server_error() -> None:
    with pytest.raises(OptionError, match=r"in recipes\.engine") as caught:
        check(declared(RECIPE), Layer("in recipes.engine", {"ctx_size": -1}), admin=True)
    assert caught.value.status == 500


def test_the_backend_selector_is_not_an_option() -> None:
    assert selector([Layer("config", {"backend": "cpu"}), request(backend="boxed")]) == "boxed"
    assert check(declared(RECIPE, CPU), request(backend="boxed"), admin=False) == {}
    with pytest.raises(OptionError, match="backend"):
        selector([request(backend=3)])


@pytest.mark.parametrize(
    "args", ["--threads 4 -ngl all -fa on --temp 0.7 --mlock -ts 3,1", "-t -1 --gpu-layers 99", ""]
)
def test_allowed_tuning_flags_pass(args: str) -> None:
    assert check_args(args, FLAGS, (), "engine_args", "", "recipes.engine") == args.split()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            "--log-file /tmp/x",
            "'--log-file' is not allowed. Allowed flags: --flash-attn, "
            "--gpu-layers, --mlock, --temp, --tensor-split, --threads",
        ),
        ("--log_file /tmp/x", "'--log_file' is not allowed"),
        # llama-server reads --threads=4 as one unknown word (common/arg.cpp: "error:
        # invalid argument: --threads=4"): how to write it, not that it is not allowed
        ("--threads=4", "write '--threads 4', not '--threads=4': the engine reads a flag"),
        ("-ngl=all", "write '-ngl all', not '-ngl=all'"),
        ("--mlock=on", "write '--mlock', not '--mlock=on'"),  # a switch takes no value
        ("--log-file=/tmp/x", "'--log-file=/tmp/x' is not allowed. Allowed flags: "),
        ("--threads /etc/passwd", "--threads takes int, not '/etc/passwd'"),
        ("--threads", "--threads takes int, not 'nothing'"),
        ("-fa maybe", "-fa takes on | off"),
        ("-ngl lots", "-ngl takes int or auto | all"),
        ("--temp 1e400", "--temp takes float"),
        ("-t \u0664", "-t takes int"),  # an Arabic-Indic four: llama-server would refuse it
        ("model.gguf", "'model.gguf' is not allowed"),
        ("--threads '4", "cannot be parsed"),
    ],
)
def test_other_flags_and_bad_values_are_refused(args: str, message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("|", r"\|")):
        check_args(args, FLAGS, (), "engine_args", "in the request", "recipes.engine")


def test_an_administrator_widens_the_list_and_requests_still_cannot() -> None:
    config = check(declared(RECIPE), Layer("config", {"engine_args_allow": ["--lora"]}), admin=True)
    options, _ = resolve(
        declared(RECIPE, CPU),
        config,
        [request(engine_args="--lora /models/a.gguf -t 2")],
        "recipes.engine",
    )
    assert options["engine_args"] == "--lora /models/a.gguf -t 2"
    with pytest.raises(OptionError, match=re.escape("write '--lora /models/a.gguf', not '--lora=")):
        resolve(
            declared(RECIPE, CPU),
            config,
            [request(engine_args="--lora=/models/a.gguf")],
            "recipes.engine",
        )
    with pytest.raises(OptionError, match="'--lora' is not allowed"):
        resolve(declared(RECIPE, CPU), {}, [request(engine_args="--lora /x")], "recipes.engine")


def test_the_configuration_is_checked_once_and_keeps_its_backend(tmp_path: Path) -> None:
    settings = Settings(
        cache_dir=tmp_path, recipes={"engine": {"backend": "boxed", "ctx_size": "2048"}}
    )
    backends = Backends(
        PluginHost(), HostInfo("linux", (HostDevice(DeviceKind.CPU, "cpu"),)), settings, Lock()
    )
    assert backends.configuration(RECIPE) == {"backend": "boxed", "ctx_size": 2048}
