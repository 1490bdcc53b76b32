"""``state_meta`` (docs/sessions.md §7.7): the prefix listing, on both backends."""

from __future__ import annotations


def test_list_meta_prefix_is_literal_and_an_empty_prefix_lists_nothing(store):
    store.set_meta("loop:a", "1")
    store.set_meta("loop:b", "2")
    store.set_meta("lo_p:c", "3")
    store.set_meta("other", "4")
    assert store.list_meta_prefix("loop:") == {"loop:a": "1", "loop:b": "2"}
    assert store.list_meta_prefix("lo_p") == {"lo_p:c": "3"}  # "_" is no wildcard
    assert store.list_meta_prefix("missing") == {}
    # upstream answers nothing for an empty prefix (a namespace is needed to enumerate)
    assert store.list_meta_prefix("") == {}
