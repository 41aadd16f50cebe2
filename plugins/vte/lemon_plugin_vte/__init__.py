"""lemon-plugin-vte (skeleton): declares the ``vte`` recipe and where it runs.

Install and launch arrive with the VTE issue; until then the backend reports that no
plugin provides it (and ``unsupported`` on anything but Windows with an RDNA3 GPU).
"""

from __future__ import annotations

from collections.abc import Sequence

from lemoncore import hookimpl
from lemoncore.recipes import Backend, Device, DeviceKind, Recipe, SlotPolicy, SupportRow, Tier

RDNA3 = frozenset({"gfx1100", "gfx1101", "gfx1102"})

RECIPE = Recipe(
    name="vte",
    display_name="VTE (native AMD RDNA3)",
    default_device=Device.GPU,
    slot_policy=SlotPolicy.EXCLUSIVE_GPU,
    backends=(Backend(name="rocm", tier=Tier.EXPERIMENTAL,
                      description="vte-server; validated on gfx1102 (RX 7600).",
                      support=(SupportRow(os=frozenset({"windows"}),
                                          devices={DeviceKind.AMD_GPU: RDNA3}),)),),
)


@hookimpl
def register_recipes() -> Sequence[Recipe]:
    return [RECIPE]
