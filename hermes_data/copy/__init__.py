"""Copy a store between databases (``hermes-data copy``): :mod:`.transfer` moves the rows the
head metadata declares, losslessly and resumably; :mod:`.extras` carries what it does not.

``from hermes_data.copy import copy_store`` keeps working (re-exported lazily).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_data.copy.transfer import (CopyDanglingReferenceError, CopyReport,
                                           CopyTargetNotEmptyError, CopyVerificationError,
                                           copy_store)

_EXPORTS = ("CopyDanglingReferenceError", "CopyReport", "CopyTargetNotEmptyError",
            "CopyVerificationError", "copy_store")

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        from hermes_data.copy import transfer

        value = getattr(transfer, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
