"""Copy a store between databases (``hermes-data copy``): :mod:`.transfer` moves the rows the
head metadata declares, losslessly and resumably; :mod:`.extras` carries what it does not.

``from hermes_data.copy import copy_store`` keeps working (re-exported lazily).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_data.lazy import lazy_exports

if TYPE_CHECKING:
    from hermes_data.copy.transfer import (CopyDanglingReferenceError, CopyReport,
                                           CopyTargetNotEmptyError, CopyVerificationError,
                                           copy_store)

_EXPORTS = dict.fromkeys((
    "CopyDanglingReferenceError", "CopyReport", "CopyTargetNotEmptyError",
    "CopyVerificationError", "copy_store",
), "transfer")

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS, globals())  # hermes_data/lazy.py
