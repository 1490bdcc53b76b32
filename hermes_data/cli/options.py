"""Numeric options of ``hermes-data`` checked at argument parsing.

A number past what the command can use (``stats --hours 1e9`` overflows the date arithmetic,
``search --offset 1e20`` the SQLite integer) is refused by the parser, naming the option and
the accepted range, exit 2 — never an ``OverflowError`` from deep inside a command.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

#: One hundred years: the longest window or retention a command accepts.
HOURS_MAX = 100 * 365 * 24
DAYS_MAX = 100 * 365
#: Counts (rows, results, batch sizes): well inside SQLite's 64-bit integer.
COUNT_MAX = 1_000_000_000
#: The longest pause between optimize-storage steps, in seconds.
PAUSE_MAX = 3600.0


def bounded(kind: type, low: float, high: float, *, above: bool = False,
            unit: str = "") -> Callable[[str], float | int]:
    """An argparse ``type=`` accepting a finite ``kind`` (``int`` or ``float``) with
    ``low <= N <= high`` (``low < N`` when ``above``); anything else is refused with the
    accepted range, which argparse reports as ``argument --OPTION: …``, exit 2."""
    low_text, high_text = f"{low:,g}" if kind is float else f"{int(low):,}", (
        f"{high:,g}" if kind is float else f"{int(high):,}")
    accepted = (f"{'more than' if above else 'from'} {low_text} "
                f"{'and at most' if above else 'to'} {high_text}" + (f" {unit}" if unit else ""))
    noun = "a whole number" if kind is int else "a number"

    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {noun} (accepted: {accepted})") from None
        if kind is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a finite number (accepted: {accepted})")
        if (value <= low if above else value < low) or value > high:
            raise argparse.ArgumentTypeError(f"{text} is out of range (accepted: {accepted})")
        return value

    parse.__name__ = kind.__name__
    return parse
