"""Issue 31 item 8: text no backend can store (a lone surrogate; NUL, which PostgreSQL text
refuses) is refused with one typed error before anything is written, on both backends;
reads by such an id are "not found"; search never raises for it."""

from __future__ import annotations

import pytest

from hermes_data.errors import HermesDataError, UnstorableValueError

BAD = ["\ud800", "a\x00b", "ok\udfff" + "x" * 200]


def _counts(store) -> tuple:
    sessions = store.list_sessions(include_children=True, include_archived=True,
                                   include_hidden=True, limit=1000)
    meta = dict(store.backend.read(
        lambda c: c.exec_driver_sql("SELECT key, value FROM state_meta").fetchall()))
    return (len(sessions), store.message_count(), tuple(sorted(meta.items())),
            tuple(sorted((s.id, s.title, s.model) for s in sessions)))


@pytest.mark.parametrize("bad", BAD)
def test_every_write_refuses_with_the_typed_error_and_changes_nothing(store, bad):
    store.create_session("s", source="cli")
    store.append_message("s", "user", "hello world")
    before = _counts(store)
    writes = {
        "session_id": lambda: store.create_session(bad, source="cli"),
        "source": lambda: store.create_session("n1", source=bad),
        "model": lambda: store.create_session("n2", source="cli", model=bad),
        "system_prompt": lambda: store.create_session("n3", source="cli", system_prompt=bad),
        "session_id ": lambda: store.append_message(bad, "user", "x"),
        "role": lambda: store.append_message("s", bad, "x"),
        "tool_call_id": lambda: store.append_message("s", "tool", "x", tool_call_id=bad),
        "messages[1].tool_call_id": lambda: store.append_messages_batch(
            "s", [{"role": "user", "content": "first"},
                  {"role": "tool", "content": "x", "tool_call_id": bad}]),
        "key": lambda: store.set_meta(bad, "v"),
        "value": lambda: store.set_meta("k", bad),
    }
    for argument, write in writes.items():
        with pytest.raises(UnstorableValueError) as info:
            write()
        err = info.value
        assert isinstance(err, HermesDataError) and isinstance(err, ValueError)
        assert err.argument == argument.strip() and err.value == bad
        assert argument.strip() in str(err) and repr(bad)[:20] in str(err)
        assert len(str(err)) < 300  # the value is shown truncated
        assert _counts(store) == before, argument
    # the chunked batch encodes every row before the first commit: nothing written either
    with pytest.raises(UnstorableValueError):
        store.append_messages_batch("s", [{"role": "user", "content": "a"}] * 3
                                    + [{"role": bad, "content": "b"}], chunk_rows=2)
    assert _counts(store) == before


@pytest.mark.parametrize("bad", BAD)
def test_other_paths_raise_a_typed_error_never_the_drivers(store, bad):
    """Paths without a named check: the backend turns the driver's refusal into the typed
    error (its transaction rolled back); never a raw UnicodeEncodeError / psycopg DataError."""
    store.create_session("s", source="cli")
    with pytest.raises(HermesDataError):  # typed refusal, or "not found" for NUL on SQLite
        store.set_session_title(bad, "t")
    if "\x00" not in bad:
        with pytest.raises(UnstorableValueError):
            store.get_compression_tip(bad)


@pytest.mark.parametrize("bad", BAD)
def test_reads_by_an_unstorable_id_are_not_found(store, bad):
    store.create_session("s", source="cli")
    assert store.get_session(bad) is None
    assert store.get_messages(bad) == []
    assert store.get_meta(bad) is None
    assert store.get_session_by_title(bad) is None
    assert store.resolve_session_by_title(bad) is None


def test_content_keeps_its_documented_encoding(store):
    """Message content is the exception: lone surrogates become U+FFFD and NUL is stored
    losslessly on both backends (docs/sessions.md §6.1) — prose is never refused."""
    store.create_session("s", source="cli")
    store.append_message("s", "user", "bad \ud800 and nul\x00inside")
    assert store.get_messages("s")[0].content == "bad \ufffd and nul\x00inside"


@pytest.mark.parametrize("query", ["\ud800", "\x00", "hello\ud800", "hello\x00world",
                                   "\udfff\x00\ud800", "a\x00b\ud800c"])
def test_search_never_raises_for_unstorable_characters(store, query):
    store.create_session("s", source="cli")
    store.append_message("s", "user", "hello world")
    store.append_message("s", "user", "bad \ud800 surrogate")
    replaced = query.replace("\x00", " ").encode("utf-16-le", "surrogatepass").decode(
        "utf-16-le", "replace")
    got = store.search_messages(query)
    assert [r.id for r in got] == [r.id for r in store.search_messages(replaced)]
    assert store.search_messages(query, include_reasoning=True) is not None
    assert store.search_messages("hello", source_filter=[query]) == []
    assert store.search_messages("hello", role_filter=query) == []
    assert [r.id for r in store.search_messages("hello", exclude_sources=[query])] == \
        [r.id for r in store.search_messages("hello")]


def test_a_surrogate_query_finds_the_message_written_with_it(store):
    store.create_session("s", source="cli")
    store.append_message("s", "user", "bad \ud800 surrogate")
    assert [r.session_id for r in store.search_messages("bad \ud800 surrogate")] == ["s"]
