"""Per-handle state lives on the backend's ``HandleState`` (explicit fields), not in
module-level registries keyed by the handle: two handles keep separate state, a closed
handle's state is collected with it, and at most two weakly keyed registries remain in the
package, each saying why."""

from __future__ import annotations

import gc
import re
import weakref
from pathlib import Path

import pytest

from hermes_data.sessions.backends.base import HandleState, OpenOptions
from hermes_data.sessions.gateway.handoffs import default_claimant
from hermes_data.sessions.store import SessionStore
from hermes_data.sessions.ui.portability.export import session_columns

PACKAGE = Path(__file__).resolve().parents[3] / "hermes_data"
#: At most this many ``WeakKeyDictionary`` registries may remain, each with its reason.
MAX_REGISTRIES = 2


def _touch(store: SessionStore, sid: str) -> None:
    """Fill every concern's fields of the handle's state."""
    store.create_session(sid, "cli")
    store.append_message(sid, "user", "你好 hello")  # FTS merge cadence and CJK drain
    default_claimant(store)
    store.backend.read(lambda conn: session_columns(store, conn))


def test_two_handles_keep_separate_state_and_a_closed_ones_is_collected(tmp_path):
    a = SessionStore(tmp_path / "a.db")
    b = SessionStore(tmp_path / "b.db", config={"sessions": {"cjk_index": False,
                                                             "reap_orphan_desktop_backends": False}})
    try:
        _touch(a, "s1")
        _touch(a, "s2")
        _touch(b, "t1")
        sa, sb = a.backend.state, b.backend.state
        assert isinstance(sa, HandleState) and sa is not sb
        assert sa.options == OpenOptions() and sb.options == OpenOptions(False, False)
        assert sa.fts_merge.writes == 2 and sb.fts_merge.writes == 1
        assert sa.cjk_drain.writes == 2 and sb.cjk_drain.writes == 1
        assert sa.cjk_drain.available and not sb.cjk_drain.available  # b: cjk_index off
        assert sa.handoff_claimant and sb.handoff_claimant
        assert sa.handoff_claimant != sb.handoff_claimant
        assert default_claimant(a) == sa.handoff_claimant  # stable per handle
        assert sa.export_columns == sb.export_columns and sa.export_columns is not sb.export_columns
    finally:
        b.close()
    ref = weakref.ref(sb)
    del b, sb
    gc.collect()
    assert ref() is None, gc.get_referrers(ref())
    assert a.backend.state.fts_merge.writes == 2  # the other handle is untouched
    a.close()


def registries(sources: dict[str, str]) -> tuple[list[str], list[str]]:
    """``(registries, unexplained)``: each ``WeakKeyDictionary()`` made in ``sources``
    (name → text), and those without a comment within the four lines above saying why."""
    found, unexplained = [], []
    for name, text in sources.items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if re.search(r"WeakKeyDictionary\(\)", line) and not line.lstrip().startswith("#"):
                where = f"{name}:{i + 1}"
                found.append(where)
                above = " ".join(lines[max(0, i - 4):i])
                if not re.search(r"#.*\b(registry|handle)\b", above, re.I):
                    unexplained.append(where)
    return found, unexplained


def _package_sources() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE.parent)): p.read_text() for p in PACKAGE.rglob("*.py")}


def test_at_most_two_registries_remain_each_with_its_reason():
    found, unexplained = registries(_package_sources())
    assert len(found) <= MAX_REGISTRIES, found
    assert unexplained == []


def test_the_registry_scan_fails_on_a_synthetic_registry():
    source = "import weakref\n_states = weakref.WeakKeyDictionary()\n"
    found, unexplained = registries({"x.py": source, "y.py": source, "z.py": source})
    assert len(found) == 3 > MAX_REGISTRIES
    assert unexplained == ["x.py:2", "y.py:2", "z.py:2"]


@pytest.mark.parametrize("token", ["ContextVar"])
def test_no_context_variable_in_the_package(token):
    hits = [name for name, text in _package_sources().items() if token in text]
    assert hits == []


def test_the_context_variable_scan_fails_on_a_synthetic_module():
    source = "from contextvars import ContextVar\n_X: ContextVar[bool] = ContextVar('x')\n"
    sources = {**_package_sources(), "hermes_data/synthetic.py": source}
    assert [n for n, text in sources.items() if "ContextVar" in text] == ["hermes_data/synthetic.py"]
