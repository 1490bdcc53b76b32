"""A context variable set for the duration of a ``with`` block.

The store constructor scopes per-open settings this way (``sessions.cjk_index``, orphan
reaping): the backend's open reads them without seeing the store's configuration. A class,
not a ``contextlib`` generator, because every store open enters it.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Generic, TypeVar

T = TypeVar("T")


class Scoped(Generic[T]):
    """``with Scoped(var, value):`` — ``var`` holds ``value`` inside the block and gets its
    previous value back on the way out (also when the block raises)."""

    __slots__ = ("_var", "_value", "_token")

    def __init__(self, var: ContextVar[T], value: T) -> None:
        self._var = var
        self._value = value

    def __enter__(self) -> None:
        self._token: Token[T] = self._var.set(self._value)

    def __exit__(self, *exc_info: object) -> None:
        self._var.reset(self._token)
