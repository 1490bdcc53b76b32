"""The records the by-path diagnostics of :mod:`hermes_data.files` return.

Their own module (issue 14, cold start): a dataclass costs 0.2–0.5 ms to create, and a process
that only opens a store never asks who holds a file, its permissions or its descriptor budget.
:mod:`hermes_data.files` imports them on first use and still exports them under its own name.
"""

from __future__ import annotations

import resource
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Holder:
    """A process with a descriptor on a file."""

    pid: int
    name: str
    path: str
    deleted: bool = False


@dataclass
class FileFacts:
    """Permissions and sizes of a database and its sidecars, read by ``stat``."""

    path: str
    exists: bool
    mode: str | None = None
    owner_only: bool | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    #: Where ``path`` leads when it is a symbolic link (facts are the target's), else None.
    link_target: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class DescriptorBudget:
    """Open descriptors of this process against its soft limit."""

    open: int | None
    soft_limit: int | None

    @property
    def headroom(self) -> int | None:
        """Descriptors left; ``None`` when unmeasurable or unlimited."""
        if self.open is None or self.soft_limit in (None, resource.RLIM_INFINITY):
            return None
        return self.soft_limit - self.open
