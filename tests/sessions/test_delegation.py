"""The delegation mechanism of the ``SessionStore`` tables (:mod:`hermes_data.sessions.handle`)."""

from __future__ import annotations

import inspect

import pytest

from hermes_data.sessions.handle import Op, static
from hermes_data.sessions.store import SessionStore

pytestmark = pytest.mark.journal_independent("pure Python descriptors")


def _rename(store: object, old: str, *, to: str = "") -> tuple[object, str, str]:
    """Rename ``old`` (the operation's docstring)."""
    return store, old, to


def _shout(text: str) -> str:
    """Upper-case ``text``."""
    return text.upper()


class _Table:
    rename = Op(_rename)
    shout = static(_shout)


def test_an_op_is_the_function_bound_to_the_store():
    """On an instance: ``fn`` with the store first, the store dropped from the signature,
    ``fn``'s docstring. On the class: the ``Op``, whose ``fn`` is the function."""
    table = _Table()
    assert table.rename("a", to="b") == (table, "a", "b")
    assert (str(inspect.signature(table.rename))
            == "(old: 'str', *, to: 'str' = '') -> 'tuple[object, str, str]'")
    assert table.rename.__doc__ == _rename.__doc__
    assert isinstance(inspect.getattr_static(_Table, "rename"), Op)
    assert _Table.rename.fn is _rename and _Table.rename.__doc__ == _rename.__doc__


def test_a_static_entry_needs_no_store():
    """A ``static`` entry is the function itself, on the instance and on the class."""
    assert _Table().shout("x") == _Table.shout("x") == "X"
    assert isinstance(inspect.getattr_static(_Table, "shout"), staticmethod)


def test_every_table_uses_the_one_mechanism():
    """Every public callable the five tables give ``SessionStore`` is an ``Op`` or a
    ``static`` entry (the store's own methods aside)."""
    from hermes_data.sessions.agent.api import AgentTurnAPI
    from hermes_data.sessions.coordination.api import CoordinationAPI
    from hermes_data.sessions.gateway.api import GatewayAPI
    from hermes_data.sessions.storage.api import StorageAPI
    from hermes_data.sessions.ui.api import UiAPI
    tables = (AgentTurnAPI, CoordinationAPI, GatewayAPI, StorageAPI, UiAPI)
    assert set(tables) <= set(SessionStore.__mro__)
    for table in tables:
        entries = [a for n, a in vars(table).items() if not n.startswith("__")]
        assert any(isinstance(a, Op) for a in entries), table.__name__
        for name, attr in vars(table).items():
            if not name.startswith("__"):  # a plain function or a data constant otherwise
                assert isinstance(attr, (Op, staticmethod)) or not callable(attr), \
                    f"{table.__name__}.{name}"
