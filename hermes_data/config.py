"""Where the stores live.

Resolution order for each store (first match wins):

1. an explicit URL or path handed to the API / CLI (``--url``);
2. an environment override: ``HERMES_DATA_TELEMETRY_URL`` / ``HERMES_DATA_SESSIONS_URL``
   (any SQLAlchemy URL, e.g. ``sqlite:////var/lib/hermes/telemetry.db`` or
   ``postgresql+psycopg://host/db``);
3. the upstream default location (docs/telemetry.md §1.1 and docs/sessions.md §1):

   * telemetry: ``$HERMES_TELEMETRY_HOME/telemetry/telemetry.db`` if that variable is
     non-empty, else ``$HERMES_HOME/telemetry/telemetry.db``, else
     ``~/.hermes/telemetry/telemetry.db``;
   * sessions: ``$HERMES_HOME/state.db``, else ``~/.hermes/state.db``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from sqlalchemy.engine import URL, make_url

from hermes_data.errors import ConfigurationError

STORES = ("telemetry", "sessions")

_URL_ENV = {
    "telemetry": "HERMES_DATA_TELEMETRY_URL",
    "sessions": "HERMES_DATA_SESSIONS_URL",
}


#: ``hermes_home()``'s answers by ``($HERMES_HOME, $HOME)``, when those two variables alone
#: decide it (POSIX, ``$HOME`` set, ``$HERMES_HOME`` not ``~user``): every store open asks.
_HOMES: dict[tuple[str, str], Path] = {}


def hermes_home() -> Path:
    """Return ``$HERMES_HOME`` (non-empty) or ``~/.hermes`` (``~`` expanded as
    ``Path.expanduser`` does, by string: every store open asks)."""
    raw = os.environ.get("HERMES_HOME", "")
    user = os.environ.get("HOME")
    if user is not None:
        known = _HOMES.get((raw, user))
        if known is not None:
            return known
    home = raw.strip()
    base = os.path.expanduser(home or "~")
    if base[:1] == "~":  # what Path.expanduser raises when no home directory is known
        raise RuntimeError("Could not determine home directory.")
    found = Path(base if home else os.path.join(base, ".hermes"))
    if user is not None and os.name == "posix" and (home[:1] != "~" or home == "~"
                                                    or home.startswith("~/")) \
            and len(_HOMES) < 64:  # expanded from $HOME alone (not ~user: the password file)
        _HOMES[(raw, user)] = found
    return found


def config_section(config: Any, name: str) -> Mapping[str, Any]:
    """The ``name`` section of a store configuration — a mapping, a zero-argument callable
    returning one, or None — as a mapping (empty when absent, None or not a mapping). An
    exception raised by the callable propagates: each reader decides what a broken
    configuration means for its setting."""
    if config is None:  # no configuration (every store open asks)
        return _NO_SECTION
    cfg = config() if callable(config) else config
    section = cfg.get(name, _NO_SECTION) if isinstance(cfg, Mapping) else _NO_SECTION
    return section if isinstance(section, Mapping) else _NO_SECTION


_NO_SECTION: Mapping[str, Any] = MappingProxyType({})


def telemetry_home() -> Path:
    """Directory holding ``telemetry.db``, ``budget.yaml`` and ``pricing.yaml``."""
    override = os.environ.get("HERMES_TELEMETRY_HOME", "").strip()
    base = Path(override).expanduser() if override else hermes_home()
    return base / "telemetry"


def default_db_path() -> Path:
    """The session store's default file, ``$HERMES_HOME/state.db``, resolved at call time
    (an import-time default kept pointing at the real file after a fixture redirected
    ``HERMES_HOME``; docs/sessions-storage.md §3.1). Re-exported by
    :mod:`hermes_data.isolation`."""
    return hermes_home() / "state.db"


def default_path(store: str) -> Path:
    """Default SQLite file of ``store`` (``"telemetry"`` or ``"sessions"``)."""
    check_store(store)
    if store == "telemetry":
        return telemetry_home() / "telemetry.db"
    return default_db_path()


def check_store(store: str) -> str:
    """Return ``store`` if it names a known store, else raise :class:`ConfigurationError`."""
    if store not in STORES:
        raise ConfigurationError(f"unknown store {store!r}; expected one of {', '.join(STORES)}")
    return store


#: ``URL.create("sqlite")``, made once: ``.set(database=...)`` gives the URL ``URL.create``
#: would (equal, same hash) without re-validating an empty query — whose nested recursive
#: helper left a reference cycle (garbage for the collector) at every store open.
_SQLITE_URL = URL.create("sqlite")


def resolve_url(store: str, url: str | os.PathLike | URL | None = None) -> URL:
    """Resolve the database URL of ``store``.

    ``url`` may be a SQLAlchemy URL (string or :class:`URL`) or a plain filesystem path,
    which is taken as a SQLite file.
    """
    check_store(store)
    if url is None:
        url = os.environ.get(_URL_ENV[store], "").strip() or None
    if url is None:
        return _SQLITE_URL.set(database=str(default_path(store)))
    if isinstance(url, URL):
        return url
    text = os.fspath(url)
    if "://" not in text:
        name = str(_path_of(text))  # pathlib's spelling (a Path caches its str)
        if name[:1] == "~":  # Path.expanduser looks at the first part only
            name = str(Path(name).expanduser())
        return _SQLITE_URL.set(database=name)
    try:
        return make_url(text)
    except Exception as exc:  # sqlalchemy raises ArgumentError with a terse message
        raise ConfigurationError(f"not a database URL: {text!r} ({exc})") from exc


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, or ``None`` for other backends and in-memory URLs."""
    if url.get_backend_name() != "sqlite":
        return None
    if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
        return None
    return _path_of(url.database)


@functools.lru_cache(maxsize=256)
def _path_of(text: str) -> Path:
    # Path(text), remembered: a Path is immutable and a function of its text alone.
    return Path(text)
