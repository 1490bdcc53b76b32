"""The one way the command line writes to the terminal.

:mod:`hermes_data.cli` and the ``cli_*`` modules whose subcommands it registers print only
through :func:`emit`; the library itself never prints. A module of its own so that the
``cli_*`` modules need not import :mod:`hermes_data.cli`, which imports them.
"""

from __future__ import annotations


def emit(*args, **kwargs) -> None:
    """Write to the terminal (``print``'s arguments)."""
    print(*args, **kwargs)
