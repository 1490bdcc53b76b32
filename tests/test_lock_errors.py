"""The one lock-conflict classifier (:mod:`hermes_data.locking`), on errors produced by real
SQLite files and by the real PostgreSQL server, wrapped by SQLAlchemy and unwrapped; and the
guard that keeps it the only one."""

from __future__ import annotations

import ast
import re
import sqlite3
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from hermes_data.locking import (PG_LOCK_KINDS, SQLITE_LOCK_KINDS, LockConflict, driver_error,
                                 is_lock_conflict, lock_conflict_kind, sqlite_result_code,
                                 sqlstate)

PACKAGE = Path(__file__).resolve().parent.parent / "hermes_data"
CLASSIFIER = PACKAGE / "locking.py"

sqlite_only = pytest.mark.journal_independent("an error object, not a store: no journal policy")


# ---------------------------------------------------------------------------------------
# SQLite: real errors
# ---------------------------------------------------------------------------------------


def _busy_error(path: Path, wrapped: bool) -> BaseException:
    """'database is locked' (SQLITE_BUSY): one connection holds the write lock, a second
    asks for it with a busy timeout of 0."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE IF NOT EXISTS t (x)")
    holder.execute("BEGIN IMMEDIATE")
    try:
        if wrapped:
            engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0},
                                      poolclass=sa.pool.NullPool)
            try:
                with engine.begin() as conn:
                    conn.exec_driver_sql("INSERT INTO t VALUES (1)")
            except sa.exc.OperationalError as exc:
                return exc
            finally:
                engine.dispose()
        else:
            other = sqlite3.connect(path, timeout=0, isolation_level=None)
            try:
                other.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                return exc
            finally:
                other.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    raise AssertionError("the second writer was not refused")


def _table_locked_error(name: str) -> sqlite3.OperationalError:
    """'database table is locked' (SQLITE_LOCKED, shared cache): a reader meets a table a
    second connection of the same shared cache is writing."""
    uri = f"file:{name}?mode=memory&cache=shared"
    writer = sqlite3.connect(uri, uri=True, isolation_level=None)
    reader = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=0)
    try:
        writer.execute("CREATE TABLE t (x)")
        writer.execute("BEGIN")
        writer.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(sqlite3.OperationalError) as info:
            reader.execute("SELECT * FROM t").fetchall()
        writer.execute("ROLLBACK")
        return info.value
    finally:
        reader.close()
        writer.close()


@sqlite_only
@pytest.mark.parametrize("wrapped", [False, True], ids=["sqlite3", "sqlalchemy"])
def test_sqlite_busy_is_a_busy_lock_conflict(tmp_path, wrapped):
    exc = _busy_error(tmp_path / "busy.db", wrapped)
    assert "database is locked" in str(exc)
    assert isinstance(driver_error(exc), sqlite3.OperationalError)
    assert sqlite_result_code(exc) == 5
    assert lock_conflict_kind(exc) is LockConflict.BUSY
    assert is_lock_conflict(exc)
    assert is_lock_conflict(exc, kinds=SQLITE_LOCK_KINDS)
    assert not is_lock_conflict(exc, kinds=PG_LOCK_KINDS)


@sqlite_only
def test_sqlite_shared_cache_table_lock_is_a_locked_conflict():
    exc = _table_locked_error("locking_test_table_lock")
    assert "database table is locked" in str(exc)
    assert sqlite_result_code(exc) == 6  # SQLITE_LOCKED_SHAREDCACHE masked to its primary
    assert lock_conflict_kind(exc) is LockConflict.LOCKED
    wrapped = sa.exc.OperationalError("SELECT * FROM t", {}, exc)
    assert lock_conflict_kind(wrapped) is LockConflict.LOCKED


@sqlite_only
def test_other_sqlite_errors_are_not_lock_conflicts(tmp_path):
    con = sqlite3.connect(tmp_path / "plain.db")
    with pytest.raises(sqlite3.OperationalError) as info:
        con.execute("SELECT busy FROM locked")  # "no such table: locked" — coded SQLITE_ERROR
    con.close()
    assert "locked" in str(info.value) and sqlite_result_code(info.value) == 1
    assert not is_lock_conflict(info.value)  # the code decides, not the word in the name
    wrapped = sa.exc.OperationalError("SELECT busy FROM locked", {}, info.value)
    assert not is_lock_conflict(wrapped)  # nor the SQL text of SQLAlchemy's wrapper
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"x" * 4096)
    con = sqlite3.connect(bad)
    with pytest.raises(sqlite3.DatabaseError) as info:
        con.execute("SELECT * FROM sqlite_master").fetchall()
    con.close()
    assert not is_lock_conflict(info.value)


@sqlite_only
def test_message_only_errors_and_the_named_quirk():
    # No result code, no SQLSTATE (a bare exception, or text): the message decides.
    assert lock_conflict_kind(sqlite3.OperationalError("database is locked")) is LockConflict.BUSY
    assert lock_conflict_kind("database table is locked: t") is LockConflict.LOCKED
    assert lock_conflict_kind("database schema is locked: main") is LockConflict.LOCKED
    assert lock_conflict_kind(RuntimeError("store busy")) is LockConflict.BUSY
    assert lock_conflict_kind("deadlock detected") is LockConflict.DEADLOCK
    assert lock_conflict_kind("could not serialize access") is LockConflict.SERIALIZATION
    assert lock_conflict_kind("canceling statement due to lock timeout") \
        is LockConflict.LOCK_NOT_AVAILABLE
    assert lock_conflict_kind("disk I/O error") is None
    assert not is_lock_conflict("deadlock detected", kinds=SQLITE_LOCK_KINDS)
    # SQLITE_DONE's text counts only where a caller asks for it (the read/write retry loops).
    done = sqlite3.OperationalError("no more rows available")
    assert not is_lock_conflict(done)
    assert lock_conflict_kind(done, sqlite_done_means_busy=True) is LockConflict.BUSY


@sqlite_only
def test_session_store_callers_on_real_sqlite_errors(tmp_path):
    from hermes_data.sessions.backends.sqlite_reads import is_busy, read_retryable
    from hermes_data.sessions.core.persistence_errors import classify_persistence_error
    from hermes_data.sessions.storage.handle_guards import is_transient_sqlite_error

    for exc in (_busy_error(tmp_path / "a.db", False), _busy_error(tmp_path / "b.db", True),
                _table_locked_error("locking_test_callers")):
        assert is_busy(exc) and read_retryable(exc) and is_transient_sqlite_error(exc)
        assert classify_persistence_error(exc) == "locked"
    assert classify_persistence_error("database disk image is malformed") == "corrupt"
    assert classify_persistence_error("disk I/O error") == "disk"


# ---------------------------------------------------------------------------------------
# PostgreSQL: real errors
# ---------------------------------------------------------------------------------------


@pytest.fixture
def pg_engine(pg_url):
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id int PRIMARY KEY, v int)")
        conn.exec_driver_sql("INSERT INTO t VALUES (1, 0), (2, 0)")
    yield engine
    engine.dispose()


def _while_row_locked(engine: sa.Engine, statement: str) -> sa.exc.DBAPIError:
    with engine.connect() as holder, holder.begin():
        holder.exec_driver_sql("SELECT * FROM t WHERE id = 1 FOR UPDATE")
        with engine.connect() as other, pytest.raises(sa.exc.DBAPIError) as info:
            with other.begin():
                other.exec_driver_sql("SET LOCAL lock_timeout = '100ms'")
                other.exec_driver_sql(statement)
    return info.value


@pytest.mark.parametrize("statement", [
    "SELECT * FROM t WHERE id = 1 FOR UPDATE NOWAIT",  # NOWAIT on a locked row
    "UPDATE t SET v = 1 WHERE id = 1",  # lock_timeout expires
], ids=["nowait", "lock_timeout"])
def test_pg_lock_not_available(pg_engine, statement):
    exc = _while_row_locked(pg_engine, statement)
    for err in (exc, exc.orig):  # wrapped by SQLAlchemy, and psycopg's own
        assert sqlstate(err) == "55P03"
        assert lock_conflict_kind(err) is LockConflict.LOCK_NOT_AVAILABLE
        assert is_lock_conflict(err, kinds=PG_LOCK_KINDS)
        assert not is_lock_conflict(err, kinds=SQLITE_LOCK_KINDS)


def test_pg_serialization_failure(pg_engine):
    with pg_engine.connect() as a, pg_engine.connect() as b:
        a.exec_driver_sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
        a.exec_driver_sql("SELECT v FROM t WHERE id = 1").fetchall()  # a's snapshot
        with b.begin():
            b.exec_driver_sql("UPDATE t SET v = 5 WHERE id = 1")
        with pytest.raises(sa.exc.DBAPIError) as info:
            a.exec_driver_sql("UPDATE t SET v = 6 WHERE id = 1")
        a.rollback()
    for err in (info.value, info.value.orig):
        assert sqlstate(err) == "40001"
        assert lock_conflict_kind(err) is LockConflict.SERIALIZATION


def test_pg_deadlock(pg_engine):
    errors: list[BaseException] = []
    with pg_engine.connect() as a, pg_engine.connect() as b:
        for conn in (a, b):
            conn.exec_driver_sql("BEGIN")
            conn.exec_driver_sql("SET LOCAL deadlock_timeout = '50ms'")
            conn.exec_driver_sql("SET LOCAL lock_timeout = '10s'")
        a.exec_driver_sql("UPDATE t SET v = 1 WHERE id = 1")
        b.exec_driver_sql("UPDATE t SET v = 1 WHERE id = 2")

        def cross(conn, row):
            try:
                conn.exec_driver_sql(f"UPDATE t SET v = 2 WHERE id = {row}")
            except sa.exc.DBAPIError as exc:
                errors.append(exc)
            finally:
                conn.rollback()  # the survivor's wait ends when the victim rolls back

        thread = threading.Thread(target=cross, args=(a, 2))
        thread.start()
        cross(b, 1)
        thread.join(20)
    assert len(errors) == 1
    for err in (errors[0], errors[0].orig):
        assert sqlstate(err) == "40P01"
        assert lock_conflict_kind(err) is LockConflict.DEADLOCK


def test_pg_other_errors_are_not_lock_conflicts(pg_engine):
    with pg_engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as info:
        conn.exec_driver_sql("SELECT busy FROM t")  # undefined_column, naming "busy"
    assert sqlstate(info.value) == "42703" and "busy" in str(info.value)
    assert not is_lock_conflict(info.value)


def test_pg_callers_on_a_real_lock_error(pg_engine):
    from hermes_data.migrate import runner
    from hermes_data.sessions.core.persistence_errors import classify_persistence_error
    from hermes_data.sessions.search.postgres import _pg_busy
    from hermes_data.sessions.storage.handle_guards import is_transient_sqlite_error

    exc = _while_row_locked(pg_engine, "SELECT * FROM t WHERE id = 1 FOR UPDATE NOWAIT")
    assert _pg_busy(exc)
    assert classify_persistence_error(exc) == "locked"
    # SQLite-only callers keep their outcome for PostgreSQL errors (kinds=SQLITE_LOCK_KINDS).
    assert not is_transient_sqlite_error(exc)
    assert not runner.is_sqlite_lock_conflict(exc)


# ---------------------------------------------------------------------------------------
# The guard: one classifier
# ---------------------------------------------------------------------------------------

#: Text a lock classifier matches (lowercased substrings) and SQLSTATEs it compares.
LOCK_MARKERS = ("locked", "busy", "deadlock", "could not serialize", "lock not available",
                "could not obtain lock", "lock timeout")
LOCK_SQLSTATES = {"55p03", "40p01", "40001"}


#: A class name in CamelCase ("CompressionSessionBusyError" in a table of exported names)
#: names a type, it is no phrase of a driver's message.
_CLASS_NAME = re.compile(r"(?:[A-Z][a-z0-9]+){2,}")


def _marker(node: ast.AST) -> bool:
    if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
        return False
    if _CLASS_NAME.fullmatch(node.value):
        return False
    text = node.value.lower()
    return text in LOCK_SQLSTATES or any(m in text for m in LOCK_MARKERS)


def _is_lock_code_test(node: ast.Compare) -> bool:
    # ``code & 0xFF in (5, 6)`` / ``code & 0xFF == 5``: SQLITE_BUSY / SQLITE_LOCKED by number.
    left = node.left
    if not (isinstance(left, ast.BinOp) and isinstance(left.op, ast.BitAnd)):
        return False
    values = []
    for comp in node.comparators:
        values += comp.elts if isinstance(comp, (ast.Tuple, ast.List, ast.Set)) else [comp]
    return any(isinstance(v, ast.Constant) and v.value in (5, 6) for v in values)


def lock_classifiers_in(source: str) -> list[tuple[int, str]]:
    """Lines of ``source`` that classify lock errors themselves. The rule: a string
    constant carrying a lock marker (:data:`LOCK_MARKERS`, or a lock SQLSTATE) used as a
    pattern — the left side of ``in`` / ``not in``, a side of ``==`` / ``!=``, an element of
    a tuple/list/set literal made only of strings (a phrase table), or a ``startswith`` /
    ``endswith`` argument — or SQLite's busy/locked result codes tested by number. Labels
    (``return "busy"``), log text, docstrings and dict keys are not patterns."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if _is_lock_code_test(node):
                found.append((node.lineno, "SQLite result code 5/6"))
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and _marker(node.left):
                    found.append((node.lineno, f"{node.left.value!r} in ..."))
                if isinstance(op, (ast.Eq, ast.NotEq)) and (_marker(node.left) or _marker(right)):
                    found.append((node.lineno, "== lock marker"))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if node.elts and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                 for e in node.elts) and any(_marker(e) for e in node.elts):
                found.append((node.lineno, "phrase table of lock markers"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith") \
                and any(_marker(a) for a in node.args):
            found.append((node.lineno, f".{node.func.attr}(lock marker)"))
    return found


@pytest.mark.journal_independent("static source scan")
@pytest.mark.parametrize("source", [
    'def f(exc):\n    msg = str(exc).lower()\n    return "locked" in msg or "busy" in msg\n',
    'RETRY = ("locked", "busy", "schema has changed")\n',
    'def f(exc):\n    return getattr(exc, "sqlstate", None) in {"55P03", "40P01"}\n',
    'def f(code):\n    return code is not None and code & 0xFF in (5, 6)\n',
    'def f(exc):\n    return exc.pgcode == "40001"\n',
    'def f(m):\n    return any(p in m for p in ["database table is locked"])\n',
    'def f(m):\n    return m.startswith("deadlock")\n',
])
def test_the_guard_finds_a_second_classifier(source):
    assert lock_classifiers_in(source), source


@pytest.mark.journal_independent("static source scan")
def test_the_guard_leaves_labels_and_prose_alone():
    source = ('def f(ok):\n    """Busy ⇒ False; the database is locked."""\n'
              '    log.info("write lock busy: %s", ok)\n'
              '    hint = {"busy": "retry later"}\n'
              '    exported = ("SessionDB", "CompressionSessionBusyError")\n'
              '    return "locked" if ok else ("busy", 3)\n')
    assert lock_classifiers_in(source) == []


@pytest.mark.journal_independent("static source scan")
def test_hermes_data_has_one_lock_classifier():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == CLASSIFIER:
            continue
        for line, why in lock_classifiers_in(path.read_text()):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {why}")
    assert offenders == [], ("classify lock errors with hermes_data.locking "
                             "(is_lock_conflict / lock_conflict_kind), not here:\n"
                             + "\n".join(offenders))
    assert lock_classifiers_in(CLASSIFIER.read_text())  # the scan does see the real one
