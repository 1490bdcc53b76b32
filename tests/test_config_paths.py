"""The remembered path answers of :mod:`hermes_data.config` (issue 14: every store open asks)
are the answers of the plain computation, and follow the environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from hermes_data import config

pytestmark = pytest.mark.journal_independent("path and URL resolution")

TEXTS = ["/tmp/x/state.db", "/tmp//x/./state.db", "/tmp/x/state.db/", "//tmp/x/state.db",
         "rel/state.db", "./state.db", "a/../b/state.db", "~/state.db", "./~/state.db",
         "~", "/tmp/x y/é.db"]


@pytest.mark.parametrize("text", TEXTS)
def test_resolve_url_of_a_path_is_url_create_of_its_expanded_path(text):
    expected = URL.create("sqlite", database=str(Path(text).expanduser()))
    for _ in range(2):  # the second answer is the remembered one
        got = config.resolve_url("sessions", text)
        assert got == expected and hash(got) == hash(expected)
        assert got.render_as_string() == expected.render_as_string()
        assert config.sqlite_path(got) == Path(str(Path(text).expanduser()))


def test_default_url_is_url_create_of_the_default_path():
    expected = URL.create("sqlite", database=str(config.default_path("sessions")))
    assert config.resolve_url("sessions") == expected


def test_hermes_home_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "a"))
    assert config.hermes_home() == tmp_path / "a"
    assert config.hermes_home() == tmp_path / "a"
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "b"))
    assert config.hermes_home() == tmp_path / "b"
    monkeypatch.delenv("HERMES_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "u1"))
    assert config.hermes_home() == tmp_path / "u1" / ".hermes"
    monkeypatch.setenv("HOME", str(tmp_path / "u2"))
    assert config.hermes_home() == tmp_path / "u2" / ".hermes"
    monkeypatch.setenv("HERMES_HOME", "~/h")
    assert config.hermes_home() == tmp_path / "u2" / "h"
    monkeypatch.setenv("HOME", str(tmp_path / "u3"))
    assert config.hermes_home() == tmp_path / "u3" / "h"
    monkeypatch.setenv("HERMES_HOME", "   ")  # blank: the default
    assert config.hermes_home() == tmp_path / "u3" / ".hermes"


def test_hermes_home_of_another_user_is_not_remembered(monkeypatch):
    monkeypatch.setenv("HERMES_HOME", "~root/h")
    expected = Path(os.path.expanduser("~root/h"))
    assert config.hermes_home() == expected
    assert ("~root/h", os.environ["HOME"]) not in config._HOMES
