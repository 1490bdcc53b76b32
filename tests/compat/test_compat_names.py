"""Every upstream name of :mod:`hermes_data.compat.names` exists where the table says
(docs/compat.md): each ``SessionDB`` method is defined by its area's class and reached from
``SessionDB``; each class constant is on ``SessionDB``; each module name is importable from
``hermes_data.compat`` unless :data:`NOT_PROVIDED` gives the reason; and ``SessionDB`` has no
public method the table does not list."""

from __future__ import annotations

import importlib
import inspect

import pytest

import hermes_data.compat
from hermes_data.compat import SessionDB
from hermes_data.compat.base import CompatBase
from hermes_data.compat.names import (MODULE_NAMES, NOT_PROVIDED, SESSION_DB_ATTRIBUTES,
                                      SESSION_DB_METHODS)
from hermes_data.sessions.agent.activity import TITLE_SOURCES

pytestmark = pytest.mark.journal_independent("static name table")


#: SessionDB's public names beyond upstream's methods and constants: the typed store, the
#: constructor over an open store, and upstream's two instance attributes.
EXTRA_PUBLIC = frozenset({"store", "over", "db_path", "read_only"})

METHODS = [(area, name) for area, names in SESSION_DB_METHODS.items() for name in names]


def area_class(area: str) -> type:
    """The one method class the compat module ``area`` defines."""
    module = importlib.import_module(f"hermes_data.compat.{area}")
    classes = [c for c in vars(module).values() if inspect.isclass(c)
               and issubclass(c, CompatBase) and c is not CompatBase
               and c.__module__ == module.__name__]
    assert len(classes) == 1, f"{area}: {classes}"
    return classes[0]


def test_the_table_has_upstreams_175_methods_once_each():
    names = [name for _, name in METHODS]
    assert len(names) == 175 and len(set(names)) == 175
    assert len(SESSION_DB_METHODS["core_methods"]) == 29
    assert len(SESSION_DB_METHODS["agent_methods"]) == 52
    assert len(SESSION_DB_METHODS["maintenance_methods"]) == 12


@pytest.mark.parametrize("area,name", METHODS, ids=[f"{a}.{n}" for a, n in METHODS])
def test_each_method_is_defined_by_its_area_and_reached_from_sessiondb(area, name):
    cls = area_class(area)
    assert name in vars(cls), f"{cls.__name__} does not define {name}"
    assert issubclass(SessionDB, cls)
    assert inspect.getattr_static(SessionDB, name) is vars(cls)[name], \
        f"SessionDB.{name} is shadowed by another class"
    assert callable(getattr(SessionDB, name))
    assert (getattr(SessionDB, name).__doc__ or "").strip(), f"{name} has no docstring"


@pytest.mark.parametrize("name", SESSION_DB_ATTRIBUTES)
def test_each_class_constant_is_on_sessiondb(name):
    assert hasattr(SessionDB, name)
    assert getattr(SessionDB, name) is not None


def test_class_constants_agree_with_the_store():
    assert {SessionDB.TITLE_SOURCE_DERIVED, SessionDB.TITLE_SOURCE_LLM,
            SessionDB.TITLE_SOURCE_USER} == set(TITLE_SOURCES)
    assert SessionDB.MAX_TITLE_LENGTH == 100
    assert "agent_close" in SessionDB.RECOVERABLE_END_REASONS


@pytest.mark.parametrize("name", ["TITLE_SOURCE_DERIVED", "TITLE_SOURCE_LLM",
                                  "TITLE_SOURCE_USER", "CANONICAL_BOT_CHAT_TITLE",
                                  "REACTIONS_METADATA_KEY", "MAX_TITLE_LENGTH",
                                  "RECOVERABLE_END_REASONS"])
def test_class_constants_are_the_packages_public_names(name):
    import hermes_data.sessions as sessions

    assert getattr(SessionDB, name) is getattr(sessions, name)


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_each_module_name_is_importable_unless_not_provided(name):
    if name in NOT_PROVIDED:
        with pytest.raises(AttributeError, match=name):
            getattr(hermes_data.compat, name)
        with pytest.raises(ImportError):
            exec(f"from hermes_data.compat import {name}", {})
        return
    namespace: dict[str, object] = {}
    exec(f"from hermes_data.compat import {name}", namespace)
    assert namespace[name] is getattr(hermes_data.compat, name)
    assert name in hermes_data.compat.__all__



def test_not_provided_names_are_upstream_names_with_a_reason():
    assert NOT_PROVIDED, "the layer leaves upstream's FTS/schema internals out"
    for name, reason in NOT_PROVIDED.items():
        assert name in MODULE_NAMES, name
        assert isinstance(reason, str) and len(reason.strip()) > 20, name
        assert name not in hermes_data.compat.__all__


def test_all_lists_only_upstream_names():
    assert set(hermes_data.compat.__all__) <= set(MODULE_NAMES)


def test_sessiondb_has_no_public_name_outside_the_table():
    listed = {name for _, name in METHODS} | set(SESSION_DB_ATTRIBUTES) | EXTRA_PUBLIC
    public = {name for name in dir(SessionDB) if not name.startswith("_")}
    assert sorted(public - listed) == []
