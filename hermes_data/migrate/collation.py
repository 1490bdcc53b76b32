"""Byte-order collation check of a PostgreSQL database (``upgrade`` and ``doctor`` warn).

The stores keep timestamps as canonical ISO-8601 text and compare them as text, which is
chronological only under a byte-order collation.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

#: Collations under which text order is byte order (what SQLite does, and what the canonical
#: ISO-8601 timestamp comparisons of the stores assume).
BYTE_ORDER_COLLATIONS = frozenset({"C", "POSIX", "C.UTF-8", "C.utf8", "ucs_basic"})


def server_collation_warning(conn: Connection) -> str | None:
    """On PostgreSQL: a warning when the database's collation is not byte order, else None."""
    if conn.dialect.name != "postgresql":
        return None
    row = conn.exec_driver_sql(
        "SELECT * FROM pg_database WHERE datname = current_database()"
    ).mappings().one()
    collation = row["datcollate"]
    if row.get("datlocprovider") == "i":  # PostgreSQL 15+: an ICU default collation
        collation = f"{row.get('daticulocale')} (ICU)"
    if collation in BYTE_ORDER_COLLATIONS:
        return None
    return (f"database collation is {collation!r}, not byte order: timestamps are stored as "
            "ISO-8601 text and time windows compare them as text; create the database with "
            "LC_COLLATE 'C' (e.g. CREATE DATABASE … LOCALE 'C.UTF-8' TEMPLATE template0)")
