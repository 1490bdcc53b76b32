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


def test_resolved_path_is_realpath(tmp_path):
    """files.resolved_path (the header lease's key) answers what os.path.realpath does: the
    one-lstat-per-component case and every case it hands to realpath (links, relative,
    non-normal, missing components)."""
    from hermes_data.files import resolved_path

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("")
    (tmp_path / "L").symlink_to(tmp_path / "a")
    (tmp_path / "a" / "rel").symlink_to("b/f")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    d = str(tmp_path)
    cases = [f"{d}/a/b/f", f"{d}/L/b/f", f"{d}/a/rel", f"{d}/a/../a/b/f", f"{d}//a/b/f",
             f"{d}/a/./b/f", f"{d}/a/b/", f"{d}/missing/x", f"{d}/a/b/f/..", f"{d}/a/b/f/.",
             f"{d}/loop", f"{d}/loop/x", "/", "//x", "rel/x", "./x", "."]
    for case in cases:
        assert resolved_path(case) == os.path.realpath(case), case
        assert resolved_path(Path(case)) == os.path.realpath(Path(case)), case


def test_header_descriptor_closes_after_the_last_lease(tmp_path):
    """The sweep's fast path (every cached descriptor leased) keeps the answers: the last
    release of an unlocked file closes its descriptor; two leases share one."""
    from hermes_data import files

    path = tmp_path / "db"
    path.write_bytes(b"x" * 200)
    first, second = files.FileHeader(path), files.FileHeader(path)
    assert first.fd == second.fd and first.key in files._headers
    fd = first.fd
    first.release()
    assert first.key in files._headers  # still leased by the second
    second.release()
    assert first.key not in files._headers
    with pytest.raises(OSError):
        os.fstat(fd)


def test_config_section_reads_mappings_callables_and_nothing():
    """One reader of a store configuration's sections (sessions / database settings)."""
    from hermes_data.config import config_section

    assert dict(config_section(None, "sessions")) == {}
    assert dict(config_section({}, "sessions")) == {}
    assert config_section({"sessions": {"cjk_index": False}}, "sessions") == {"cjk_index": False}
    assert config_section(lambda: {"database": {"synchronous": "full"}}, "database") \
        == {"synchronous": "full"}
    assert dict(config_section({"sessions": ["not", "a", "mapping"]}, "sessions")) == {}
    assert dict(config_section(["not a mapping"], "sessions")) == {}

    def broken():
        raise OSError("config file unreadable")

    with pytest.raises(OSError, match="unreadable"):
        config_section(broken, "sessions")  # each reader decides what a broken config means
