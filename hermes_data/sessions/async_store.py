"""``AsyncSessionStore`` (also ``AsyncSessionDB``): the session store for asyncio callers
(spec sessions-ext-ui.md §4.15).

Every public callable of :class:`~hermes_data.sessions.store.SessionStore` (core, extension
areas, UI) has an ``async def`` twin with the same signature that runs it through
``asyncio.to_thread`` (the loop's default executor, ``contextvars`` copied), so a blocking
database call never freezes an event loop. Registered iterator methods
(:data:`ITERATOR_METHODS`) become async iterators pulling each item in the executor;
non-callable public attributes are plain properties. The twins are generated once from the
store's public surface when this module is imported (a test keeps the surfaces equal).

No loop-bound state is created (no ``asyncio.Lock``): one instance serves several loops and
threads. Cancelling the awaiting task does not stop the thread — a write still commits or
fails; only its result is discarded.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import types
from typing import Any, AsyncIterator, Callable

from .agent_api import _Op
from .store import SessionStore

#: Store methods returning iterators: their twins are async iterators.
ITERATOR_METHODS = frozenset({"iter_export_all"})
_DONE = object()


class AsyncSessionStore:
    """Async twins of a :class:`SessionStore`'s public methods (see the module docstring)."""

    def __init__(self, store: SessionStore) -> None:
        if not isinstance(store, SessionStore):
            raise TypeError(f"AsyncSessionStore wraps a SessionStore, got {type(store).__name__}")
        self._store = store

    @property
    def sync(self) -> SessionStore:
        """The wrapped store (for calls already running off the event loop)."""
        return self._store

    async def aclose(self) -> None:
        """Close the store off the event loop."""
        await asyncio.to_thread(self._store.close)

    async def __aenter__(self) -> "AsyncSessionStore":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def public_surface() -> dict[str, str]:
    """``name -> 'method' | 'iterator' | 'property'`` of the store's public surface."""
    out: dict[str, str] = {}
    for cls in reversed(SessionStore.__mro__):
        for name, attr in vars(cls).items():
            if name.startswith("_") or cls is object:
                continue
            if isinstance(attr, property):
                out[name] = "property"
            elif isinstance(attr, (_Op, staticmethod, classmethod, types.FunctionType)):
                out[name] = "iterator" if name in ITERATOR_METHODS else "method"
    return out


def _method(name: str, sync: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(sync)
    async def twin(self: AsyncSessionStore, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self._store, name), *args, **kwargs)
    return twin


def _iterator(name: str, sync: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(sync)
    def twin(self: AsyncSessionStore, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async def pull() -> AsyncIterator[Any]:
            it = await asyncio.to_thread(lambda: iter(getattr(self._store, name)(*args, **kwargs)))
            while True:
                item = await asyncio.to_thread(next, it, _DONE)
                if item is _DONE:
                    return
                yield item
        return pull()
    return twin


def _property(name: str) -> property:
    return property(lambda self: getattr(self._store, name),
                    doc=f"The store's ``{name}``.")


def _sync_callable(name: str) -> Callable[..., Any]:
    attr = inspect.getattr_static(SessionStore, name)
    fn = getattr(attr, "_fn", None) or getattr(attr, "__func__", None) or attr
    return fn  # type: ignore[no-any-return,unused-ignore]


for _name, _kind in public_surface().items():
    if _name in vars(AsyncSessionStore):
        continue
    if _kind == "property":
        setattr(AsyncSessionStore, _name, _property(_name))
    elif _kind == "iterator":
        setattr(AsyncSessionStore, _name, _iterator(_name, _sync_callable(_name)))
    else:
        setattr(AsyncSessionStore, _name, _method(_name, _sync_callable(_name)))

#: Upstream's name.
AsyncSessionDB = AsyncSessionStore
