"""The user-interface API's public ``SessionStore`` methods (spec sessions-ext-ui.md §4), as
one declarative delegation table — the pattern of :mod:`.agent_api`: each entry maps a public
name to an operation function (store first) in a module by concern (:mod:`.display`, …);
the class holds no state and no logic, and ``SessionStore`` inherits it.
"""

from __future__ import annotations

from . import display
from .agent_api import _Op


class UiAPI:
    """The delegation table (see the module docstring)."""

    # -- display ordering (§3.4, §4.14)
    ensure_display_order = _Op(display.ensure_display_order)
    backfill_display_order = _Op(display.backfill_display_order)
    _split = _Op(display.store_split)
