"""``hermes-data`` command line: one module per command group (``upgrade``/``status``/
``check``/``doctor`` in :mod:`.app`, the rest beside it), one way of writing to the terminal
(:mod:`.output`). The console script and ``python -m hermes_data.cli`` run :func:`main`."""

from __future__ import annotations

from hermes_data.cli.app import main

__all__ = ["main"]
