"""Column types shared by the metadata and the revisions.

SQLite declares ``TEXT`` / ``INTEGER`` / ``REAL`` (what the legacy files hold and what
``PRAGMA table_info`` must report); PostgreSQL gets the precise types the values need.
These definitions are frozen: revisions import them, so changing one would change history.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateColumn
from sqlalchemy.sql.elements import TextClause

#: TEXT on every backend.
TEXT = sa.Text()
#: INTEGER on SQLite (a rowid alias when it is the primary key), BIGINT on PostgreSQL.
INTEGER = sa.Integer().with_variant(sa.BigInteger(), "postgresql")
#: REAL on SQLite, DOUBLE PRECISION on PostgreSQL.
#: (``sa.DOUBLE_PRECISION`` is the class ``sqlalchemy.dialects.postgresql`` exports: naming
#: it here keeps the PostgreSQL dialect out of every SQLite process, issue 14.)
REAL: sa.types.TypeEngine[float] = sa.REAL().with_variant(sa.DOUBLE_PRECISION(), "postgresql")
#: BLOB on SQLite, BYTEA on PostgreSQL (``LargeBinary`` compiles to both; no dialect import).
BLOB: sa.types.TypeEngine[bytes] = sa.LargeBinary()


# SQLAlchemy's SQLite compiler wraps a textual default such as ``0.0`` in parentheses
# (``DEFAULT (0.0)``) because it contains a non-word character. Legacy files declare
# ``DEFAULT 0.0``, and ``PRAGMA table_info`` reports the text verbatim, so the head would
# differ from every adopted file. A plain numeric literal needs no parentheses: render it
# bare. Nothing else about column rendering changes.
_NUMERIC_LITERAL = re.compile(r"-?\d+(\.\d+)?")


@compiles(CreateColumn, "sqlite")
def _bare_numeric_default(element: CreateColumn, compiler, **kw) -> str:
    rendered = compiler.visit_create_column(element, **kw)
    default = element.element.server_default
    arg = getattr(default, "arg", None)
    if isinstance(arg, TextClause) and _NUMERIC_LITERAL.fullmatch(arg.text):
        rendered = rendered.replace(f"DEFAULT ({arg.text})", f"DEFAULT {arg.text}")
    return rendered
