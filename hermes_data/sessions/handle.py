"""The two halves of the ``SessionStore`` delegation pattern.

:class:`StoreHandle` is what operation modules need from a store handle (a structural type,
so they never import the facade that delegates to them). :class:`Op` and :func:`static` are
how each concern's ``api.py`` (``core``, ``agent``, ``coordination``, ``gateway``, ``ui``,
``storage``) declares its public ``SessionStore`` methods, as a class body that the store
inherits:

    class GatewayAPI:
        save_gateway_routing_entry = Op(routing.save_gateway_routing_entry)
        workspace_key = static(pickers.workspace_key)

Why a table, and why a class: the facade must stay thin (``SessionStore`` ≤ 450 lines, a
test), and the extension areas add well over a hundred methods. Each is an operation
function in a module by concern taking the store first; a table class is nothing but the
mapping from a public name to that function — no state, no ``__init__``, no logic of its
own — and ``SessionStore`` inherits it so the methods are the store's own to callers,
``help()`` and type checkers (a class body is the one table form mypy reads; a ``setattr``
loop would hide the methods from it).

:data:`UNSET` and :func:`either_spelling` let a method take a parameter under our name and
under the name upstream's ``SessionDB`` gave it (issue 33), so an upstream call site works
unchanged while mypy still sees one typed parameter.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import (TYPE_CHECKING, Any, Callable, Concatenate, Generic, ParamSpec, Protocol,
                    TypeVar, overload)

from hermes_data.sessions.backends.base import SessionBackend

if TYPE_CHECKING:  # the agent's writer, named in an annotation (handle sits below the concerns)
    from hermes_data.sessions.agent.token_writer import TokenWriter


class StoreHandle(Protocol):
    """The part of :class:`~hermes_data.sessions.store.SessionStore` operation modules use."""

    @property
    def backend(self) -> SessionBackend: ...

    @property
    def path(self) -> Path: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def token_writer(self) -> TokenWriter: ...

    def owner_profile(self) -> str | None: ...


P = ParamSpec("P")
R = TypeVar("R")


class Op(Generic[P, R]):
    """A delegation-table entry: the method ``store.name(*args, **kwargs)`` runs
    ``fn(store, *args, **kwargs)``.

    On an instance it is ``fn`` bound to the store (so :func:`inspect.signature` shows
    ``fn``'s parameters without the store, and type checkers see ``Callable[P, R]``); on the
    class it is the ``Op`` itself, whose :attr:`fn` is the operation function. The docstring
    is ``fn``'s.
    """

    def __init__(self, fn: Callable[Concatenate[Any, P], R]) -> None:
        #: The operation function, taking the store first.
        self.fn = fn
        self.__doc__ = fn.__doc__

    @overload
    def __get__(self, obj: None, owner: type) -> "Op[P, R]": ...

    @overload
    def __get__(self, obj: object, owner: type) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type) -> Any:
        return self if obj is None else types.MethodType(self.fn, obj)


def static(fn: Callable[P, R]) -> Callable[P, R]:
    """A delegation-table entry for a function that needs no store: ``store.name(...)`` and
    ``SessionStore.name(...)`` both call ``fn(...)`` (a ``staticmethod``, typed as ``fn``)."""
    return staticmethod(fn)


class _Unset:
    """The type of :data:`UNSET` (one instance; its repr names it)."""

    def __repr__(self) -> str:
        return "UNSET"


#: The default of a parameter that upstream spelled differently: "not passed under this
#: name" (see :func:`either_spelling`).
UNSET: Any = _Unset()


def either_spelling(ours: str, value: Any, upstream: str, upstream_value: Any) -> Any:
    """The argument a caller passed under our parameter name ``ours`` or under upstream's
    ``upstream`` (issue 33: an upstream call site keeps working unchanged). Both ⇒
    :class:`TypeError` naming both; neither ⇒ :class:`TypeError` naming ours, as Python does
    for a missing argument."""
    if value is not UNSET and upstream_value is not UNSET:
        raise TypeError(f"pass {ours}= or {upstream}= (upstream's spelling), not both")
    if value is not UNSET:
        return value
    if upstream_value is not UNSET:
        return upstream_value
    raise TypeError(f"missing required argument: {ours!r} (or {upstream!r})")
