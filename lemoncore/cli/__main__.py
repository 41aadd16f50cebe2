"""``python -m lemoncore.cli``: the same as the ``lemon`` console script."""

from __future__ import annotations

import sys

from lemoncore.cli import main

sys.exit(main())
