"""lemon-plugin-oci (skeleton): container engines arrive with the OCI issue.

It loads and registers nothing yet, so ``lemon plugins`` lists it as loaded with no
recipes.
"""

from __future__ import annotations
