"""What an engine needs of the host and of a load's options, decided before it starts:
the running kernel (Halogen: Linux 7.0 or newer) and a context past the model's native
one (Halogen: only with its static YaRN factor). Pure functions over data; each returns
why the start cannot work, or "".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from lemon_plugin_oci.contracts import LaunchContract

_RELEASE = re.compile(r"(\d+)\.(\d+)")


def kernel_problem(contract: LaunchContract, release: str) -> str:
    """Why ``contract``'s engine cannot run on the kernel ``release`` (``platform.release()``,
    e.g. ``6.18.6-200.fc43.x86_64``); "" when it can, or when the release does not parse
    (nothing to compare)."""
    if contract.min_kernel is None or not (found := _RELEASE.match(release)):
        return ""
    running = (int(found[1]), int(found[2]))
    if running >= contract.min_kernel:
        return ""
    wanted = ".".join(map(str, contract.min_kernel))
    return (
        f"this engine needs Linux {wanted} or newer and this host runs {release}: "
        f"{contract.sources.get('min_kernel', 'older kernels refuse it')}. Install a "
        f"Linux {wanted}+ kernel (your distribution's newer or mainline kernel package) "
        "and reboot"
    )


def ctx_problem(
    contract: LaunchContract, ctx: object, config: Mapping[str, Any], recipe: str
) -> str:
    """Why a load with context ``ctx`` cannot start (""): past the model's native context
    the contract's rope setting (an administrator option, ``config``) must be set, and
    ``native x factor`` must hold ``ctx``. A setting the contract (narrowed by the image's
    labels) does not pass counts as unset."""
    if not contract.native_ctx or not isinstance(ctx, int) or ctx <= contract.native_ctx:
        return ""
    setting = next((s for s in contract.settings if s.key == contract.rope_env), None)
    factor = config.get(setting.option.name) if setting else None
    needed = math.ceil(ctx / contract.native_ctx)
    option = setting.option.name if setting else "rope_yarn"
    if not isinstance(factor, int | float) or isinstance(factor, bool):
        why = f"needs {contract.rope_env} (the model's static YaRN factor), which is not set"
    elif factor * contract.native_ctx < ctx:
        why = (
            f"is past {contract.native_ctx} x {contract.rope_env} {factor} = "
            f"{int(factor * contract.native_ctx)}"
        )
    else:
        return ""
    return (
        f"ctx_size {ctx} is past the model's native {contract.native_ctx} and {why}; the "
        f"engine refuses it before loading ({contract.sources.get('native_ctx', '')}). Set "
        f"recipes.{recipe}.{option} = {needed} in the configuration (it rescales every "
        f"position, short prompts included), or lower ctx_size to {contract.native_ctx}"
    )
