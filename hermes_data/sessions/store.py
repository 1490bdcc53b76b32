"""``SessionStore``: the typed facade over one session-store database.

The facade validates arguments and runs query functions (``lifecycle``, ``messages``,
``lineage``, ``titles``, ``listing``, ``meta``, ``search``) through its backend — a SQLite
file (:mod:`.backends.sqlite`) or a PostgreSQL database (:mod:`.backends.postgresql`),
chosen by the URL's dialect. Transactions, retries, guards and connections are the
backend's; SQL is in :mod:`.sql`; the facade holds neither.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from sqlalchemy.engine import URL

from hermes_data.config import config_section, hermes_home, resolve_url, sqlite_path
from hermes_data.engine import SqliteSettings
from hermes_data.errors import ConfigurationError
from hermes_data import storable
from hermes_data.isolation import ensure_test_isolation
from hermes_data.sessions.core import encoding as enc
from hermes_data.sessions.agent import accounting
from hermes_data.sessions.storage.fts import cjk
from hermes_data.sessions.coordination import display_reads
from hermes_data.sessions.storage import handle_guards as guards
from hermes_data.sessions.core import lifecycle
from hermes_data.sessions.core import lineage
from hermes_data.sessions.core import listing
from hermes_data.sessions.core import meta
from hermes_data.sessions.storage import opening
from hermes_data.sessions.storage import ownership
from hermes_data.sessions.storage import reaping
from hermes_data.sessions.storage import registry
from hermes_data.sessions.storage.registry import acquire, release
from hermes_data.sessions.agent import message_rows as row_helpers
from hermes_data.sessions.core import titles
from hermes_data.sessions.core import messages as msg
from hermes_data.sessions.agent.api import AgentTurnAPI
from hermes_data.sessions.coordination.api import CoordinationAPI
from hermes_data.sessions.core.api import LineageAPI, MaintenanceAPI
from hermes_data.sessions.gateway.api import GatewayAPI
from hermes_data.sessions.storage.api import StorageAPI
from hermes_data.sessions.ui.api import UiAPI
from hermes_data.sessions.backends import (OPEN_PATIENCE_S, ROUTINE_PATIENCE_S, TRANSCRIPT_PATIENCE_S,
                       OpenOptions, SessionBackend, open_backend)
from hermes_data.sessions.errors import (SessionExportTooLargeError, SessionNotFoundError,
                     SessionResumeTooLargeError)
from hermes_data.sessions.core.lifecycle import namespaces_agree
from hermes_data.sessions.agent.projections import ConversationHooks
from hermes_data.sessions.rows import (MessageRow, RecentSessionRow, SessionListRow,
                   SessionRow)
from hermes_data.sessions.core.listing_sql import SessionFilter
from hermes_data.sessions.agent.token_writer import TokenWriter
from hermes_data.sessions.handle import UNSET, either_spelling

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from hermes_data.sessions.search.messages import SearchResult

__all__ = ["DEFAULT_MAX_EXPORT_MESSAGES", "DEFAULT_MAX_RESUME_MESSAGES", "OPEN_PATIENCE_S",
           "ROUTINE_PATIENCE_S", "TRANSCRIPT_PATIENCE_S", "SessionStore",
           "acquire", "is_transient_sqlite_error", "last_init_error", "namespaces_agree",
           "reconcile_state_schema", "release", "resolved_max_export_messages",
           "resolved_max_resume_messages"]

log = logging.getLogger("hermes_data.sessions.store")

#: Size-guard defaults (docs/sessions.md §6.5).
DEFAULT_MAX_RESUME_MESSAGES = 20000
DEFAULT_MAX_EXPORT_MESSAGES = 20000

is_transient_sqlite_error = guards.is_transient_sqlite_error

#: ``(path, exception)`` of the most recent failed construction (storage/ownership.py).
last_init_error = ownership.last_init_error


def configured_limit(config: Any, key: str, default: int) -> int:
    """``sessions.<key>`` of the store's config (mapping or callable), read at call time;
    missing, malformed or negative values give ``default``."""
    raw = config_section(config, "sessions").get(key, default)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return default
    return default if value < 0 else value


def resolved_max_resume_messages(config: Any = None) -> int:
    """The resume guard's limit a store with ``config`` (mapping or zero-argument callable,
    as ``SessionStore(config=…)`` takes) applies now: ``sessions.max_resume_messages``, else
    :data:`DEFAULT_MAX_RESUME_MESSAGES`; 0 disables the guard (docs/sessions.md §6.5). Upstream's
    name; upstream reads its global config.yaml, hermes-data the configuration it is given."""
    return configured_limit(config, "max_resume_messages", DEFAULT_MAX_RESUME_MESSAGES)


def resolved_max_export_messages(config: Any = None) -> int:
    """The export guard's limit, as :func:`resolved_max_resume_messages` (``sessions.``
    ``max_export_messages``, default :data:`DEFAULT_MAX_EXPORT_MESSAGES`)."""
    return configured_limit(config, "max_export_messages", DEFAULT_MAX_EXPORT_MESSAGES)


def _backend_options(url: Any, config: Any, *, settings: SqliteSettings | None,
                     read_only: bool, open_patience_s: float,
                     pool_size: int | None, owner: str | None) -> tuple[str, dict[str, Any]]:
    # Where the store lives (for errors) and the options its backend takes; an option of the
    # other backend is refused by name instead of being ignored.
    options: dict[str, Any] = {"read_only": read_only}
    if url.get_backend_name() == "sqlite":
        path = sqlite_path(url)
        if path is None:
            raise ConfigurationError(f"{url!s}: the session store needs a SQLite file path")
        if pool_size is not None:
            raise ConfigurationError(f"{path}: pool_size applies to PostgreSQL stores only")
        if owner is not None:
            raise ConfigurationError(f"{path}: owner_profile={owner!r} applies to PostgreSQL "
                                     "stores only (a SQLite file's owner is its path under "
                                     "hermes_root)")
        ensure_test_isolation(path)  # first: before any mkdir, lock or connection (docs/sessions.md §3.1)
        options.update(path=path, settings=settings, open_patience_s=open_patience_s,
                       pragmas=opening.configured_pragmas(config))
        return str(path), options
    where = url.render_as_string(hide_password=True)
    if settings is not None or open_patience_s != OPEN_PATIENCE_S:
        raise ConfigurationError(f"{where}: settings and open_patience_s apply to SQLite "
                                 "stores only")
    if pool_size is not None:
        options["pool_size"] = pool_size
    return where, options


def _write_checked(backend: SessionBackend, fn: Callable[[Any], Any], **texts: Any) -> Any:
    # A write of the caller's text: each value checked before the transaction (issue 31).
    storable.check_texts(texts.items())
    return backend.write(fn)


def open_options(config: Any) -> OpenOptions:
    """The open-time settings of a store ``config`` (mapping, callable or None), read once by
    the constructor: ``sessions.cjk_index`` (docs/sessions-storage.md §3.9.2) and
    ``sessions.reap_orphan_desktop_backends`` (docs/sessions-storage.md §3.8, the stale escalation). Reading never
    raises (an unreadable value keeps its default)."""
    return OpenOptions(cjk_index=cjk.configured_index(config),
                       reap_orphans=reaping.enabled(config))


class SessionStore(LineageAPI, MaintenanceAPI, CoordinationAPI, AgentTurnAPI, UiAPI, GatewayAPI,
                   StorageAPI):
    """Typed handle on one session store (the agent turn API's methods: :mod:`.agent_api`).

    ``path_or_url``: a filesystem path, ``sqlite:///`` URL or ``postgresql+psycopg://`` URL
    (default: ``$HERMES_HOME/state.db``). ``config``: mapping (or zero-argument callable
    returning one) with a ``sessions`` section holding ``max_resume_messages`` /
    ``max_export_messages`` (read at call time) and a ``database`` section of configured
    pragmas (SQLite, docs/sessions.md §8.3: ``cache_size``, ``mmap_size``, ``temp_store``,
    ``wal_autocheckpoint``, ``journal_size_limit``, ``synchronous``), read at open.
    ``hermes_root``: root used to derive the owner profile (default ``$HERMES_HOME``).
    ``settings`` and ``open_patience_s`` are SQLite options; ``pool_size`` and
    ``owner_profile`` (the profile a PostgreSQL database serves, docs/sessions-gateway.md §3.0 M3: without it
    :meth:`owner_profile` is None there) are PostgreSQL's.
    ``conversation_hooks``: the agent's transforms the projections apply.
    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, path_or_url: str | os.PathLike[str] | None = None, *,
                 settings: SqliteSettings | None = None,
                 config: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
                 hermes_root: str | os.PathLike[str] | None = None,
                 open_patience_s: float = OPEN_PATIENCE_S, read_only: bool = False,
                 pool_size: int | None = None, owner_profile: str | None = None,
                 conversation_hooks: ConversationHooks | None = None) -> None:
        url = resolve_url("sessions", path_or_url)
        self._config = config
        #: The agent's transforms the conversation projections apply (:mod:`.projections`).
        self.conversation_hooks = conversation_hooks or ConversationHooks()
        self._root = Path(hermes_root) if hermes_root is not None else hermes_home()
        where, options = _backend_options(url, config, settings=settings, read_only=read_only,
                                          open_patience_s=open_patience_s, pool_size=pool_size,
                                          owner=owner_profile)
        if owner_profile is not None and not (isinstance(owner_profile, str)
                                              and opening.PROFILE_NAME.fullmatch(owner_profile)):
            raise ConfigurationError(f"{where}: owner_profile={owner_profile!r} is not a "
                                     "profile name ([a-z0-9][a-z0-9_-]{0,63})")
        self._owner: str | None = owner_profile
        try:
            self._backend: SessionBackend = open_backend(
                url, open_options=open_options(config), **options)
        except BaseException as exc:
            ownership.record_init_error(where, exc)
            raise
        self._q = self._backend.sql
        self._tokens = TokenWriter(self._apply_tokens, where)  # owner: derived at first use
        ownership.track(self)  # the fork rule and registry ownership (docs/sessions.md §3.2)

    def _apply_tokens(self, session_id: str, delta: Any) -> None:
        owner = self.owner_profile()
        self._backend.write(lambda c: accounting.apply_token_delta(c, self._q, session_id,
                                                                   delta, owner))

    @property
    def token_writer(self) -> TokenWriter:
        """This handle's asynchronous token writer (``queue_token_counts``)."""
        return self._tokens

    # -- handle ------------------------------------------------------------------------

    @property
    def backend(self) -> SessionBackend:
        """The backend serving this store (transactions, connections, dialect)."""
        return self._backend

    @property
    def path(self) -> Path:
        """The SQLite file, or the PostgreSQL URL with its password hidden."""
        return self._backend.path

    @property
    def url(self) -> Any:
        """The resolved SQLAlchemy URL."""
        return self._backend.url

    @property
    def read_only(self) -> bool:
        """Whether the handle refuses writes."""
        return self._backend.read_only

    @property
    def engine(self) -> "Engine":
        """The SQLAlchemy engine (maintenance and tests)."""
        return self._backend.engine

    @property
    def journal_mode(self) -> str:
        """Journal mode in effect (``wal`` / ``delete``; ``n/a`` on PostgreSQL)."""
        return self._backend.journal_mode

    @property
    def fts_available(self) -> dict[str, bool]:
        """Which full-text indexes this handle can use."""
        return self._backend.fts_available

    @property
    def open_repairs(self) -> list[str]:
        """Repairs the open made (column added, trigger narrowed, …)."""
        return self._backend.open_repairs

    @property
    def quarantined(self) -> bool:
        """True once structural corruption was seen (the handle refuses further work)."""
        return self._backend.quarantined

    @property
    def read_pool(self) -> guards.ReadPool | None:
        """The SQLite handle's WAL read pool, if any."""
        return getattr(self._backend, "read_pool", None)

    def close(self) -> None:
        """Drain the token queue, then close every connection (SQLite: PASSIVE checkpoint
        first). Idempotent. A registry-owned store is released instead (docs/sessions.md §3.2); one
        inherited across ``os.fork()`` does nothing."""
        if ownership.intercept_close(self):
            return
        self._tokens.close()
        self._backend.close()

    def __enter__(self) -> "SessionStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def owner_profile(self) -> str | None:
        """Profile owning this file: ``<root>/state.db`` → ``default``,
        ``<root>/profiles/<name>/state.db`` → ``<name>``; anything else → None. A PostgreSQL
        store answers the ``owner_profile`` it was opened with (None without one)."""
        if self._owner is None:  # derived once: resolving the path costs ~0.1 ms a call
            self._owner = self._backend.owner_profile(self._root) or ""
        return self._owner or None

    # -- state_meta (docs/sessions.md §7.7) -------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        """A ``state_meta`` value, read on the writer (sees this handle's own commits); None
        for a key no row can have (NUL or a lone surrogate, issue 31)."""
        if storable.no_row_holds(key):
            return None
        return self._backend.read_on_writer(lambda conn: meta.get_meta(conn, self._q, key))

    def set_meta(self, key: str, value: str | None) -> None:
        """Upsert a ``state_meta`` value. A key or value holding NUL or a lone surrogate ⇒
        :class:`~hermes_data.errors.UnstorableValueError`, nothing written (issue 31)."""
        storable.check_texts((("key", key), ("value", value)))
        self._backend.write(lambda c: meta.set_meta(c, self._q, key, value))

    def list_meta_prefix(self, prefix: str) -> dict[str, str | None]:
        """Every ``state_meta`` key starting with ``prefix`` (escaped LIKE); ``''`` ⇒ ``{}``."""
        return self._backend.read_on_writer(
            lambda conn: meta.list_meta_prefix(conn, self._q, prefix))

    # -- lifecycle (docs/sessions.md §4.1–§4.3) ---------------------------------------------------------

    def create_session(self, session_id: str, source: str, *, user_id: str | None = None,
                       session_key: str | None = None, chat_id: str | None = None,
                       chat_type: str | None = None, thread_id: str | None = None,
                       display_name: str | None = None, origin_json: str | None = None,
                       model: str | None = None, model_config: Any = None,
                       system_prompt: str | None = None, parent_session_id: str | None = None,
                       cwd: str | None = None, git_branch: str | None = None,
                       git_repo_root: str | None = None, profile_name: str | None = None,
                       hidden: bool = False) -> str:
        """Insert a session, or enrich an existing one (fill only NULL columns). Returns its id.

        ``source``, ``user_id`` and ``started_at`` of an existing row never change. A text
        argument holding NUL or a lone surrogate ⇒ :class:`~hermes_data.errors.UnstorableValueError`
        naming it, before anything is written (issue 31).
        """
        if not session_id or not source:
            raise ValueError("create_session needs a session_id and a source")
        fields = dict(user_id=user_id, session_key=session_key, chat_id=chat_id,
                      chat_type=chat_type, thread_id=thread_id, display_name=display_name,
                      origin_json=origin_json, model=model,
                      model_config=lifecycle.config_dump(model_config),
                      parent_session_id=parent_session_id, cwd=cwd, git_branch=git_branch,
                      git_repo_root=git_repo_root, profile_name=profile_name)
        storable.check_texts((("session_id", session_id), ("source", source),
                              *fields.items(), ("system_prompt", system_prompt)))
        new = lifecycle.NewSession(session_id, source, fields, system_prompt,
                                   self.owner_profile(), hidden, profile_name is not None)
        return self._backend.write(lambda c: lifecycle.create_session(c, self._q, new),
                                   patience=TRANSCRIPT_PATIENCE_S)

    def create_child_session(self, parent_id: str, child_id: str, kind: str, *,
                             source: str | None = None, model_config: Any = None,
                             **fields: Any) -> str:
        """Create a ``branch`` / ``delegate`` / ``reset`` child carrying its lineage marker."""
        storable.check_texts((("parent_id", parent_id), ("child_id", child_id)))
        cfg = lifecycle.child_config(kind, parent_id, model_config)
        parent = self.get_session(parent_id)
        if parent is None:
            raise SessionNotFoundError(parent_id)
        return self.create_session(child_id, source or parent.source, parent_session_id=parent_id,
                                   model_config=cfg, **fields)

    def end_session(self, session_id: str, end_reason: str) -> bool:
        """End an open session; the first reason wins. Returns whether the row changed."""
        return _write_checked(self._backend, lambda c: lifecycle.end_session(
            c, self._q, session_id, end_reason), session_id=session_id, end_reason=end_reason)

    def reopen_session(self, session_id: str, *, allow_continued_parent: bool = False) -> bool:
        """Clear the end fields, first stamping ``_reset_from`` on legacy reset children. A
        compression parent with a continuation stays ended (``False``) unless
        ``allow_continued_parent=True`` (upstream's reopen, docs/sessions.md §4.2)."""
        return _write_checked(self._backend, lambda c: lifecycle.reopen_session(
            c, self._q, session_id, allow_continued_parent), session_id=session_id)

    # -- messages (docs/sessions.md §6) -----------------------------------------------------------------

    def get_messages(self, session_id: str, include_inactive: bool = False,
                     include_compacted: bool = False, limit: int | None = None,
                     offset: int = 0, latest: bool = False,
                     after_id: int | None = None) -> list[MessageRow]:
        """Transcript rows in insertion (id) order; ``after_id`` is keyset paging (docs/sessions.md §6.4).
        ``include_compacted`` (third, as upstream): the de-duplicated display history with
        compacted generations (:mod:`.display_reads`; not with ``after_id``). An id no row
        can have (NUL or a lone surrogate) reads as an unknown session: ``[]``."""
        if storable.no_row_holds(session_id):
            return []
        if include_compacted:
            if after_id is not None:
                raise ValueError("include_compacted cannot be combined with after_id")
            return display_reads.get_messages_with_compacted(
                self, session_id, include_inactive=include_inactive, limit=limit,
                offset=offset, latest=latest)
        if after_id is not None and (latest or offset):
            raise ValueError("after_id cannot be combined with latest=True or a non-zero offset")
        return self._backend.read(lambda c: msg.get_messages(
            c, self._q, session_id, include_inactive=include_inactive, limit=limit,
            offset=offset, latest=latest, after_id=after_id))

    def message_count(self, session_id: str | None = None, include_inactive: bool = False) -> int:
        """Number of (active) message rows of one session, or of the store when None."""
        if session_id is None:
            return row_helpers.store_message_count(self, include_inactive)
        return self._backend.read(
            lambda c: msg.message_count(c, self._q, session_id, include_inactive))

    # -- size guards (docs/sessions.md §6.5) ------------------------------------------------------------

    def _guard_limit(self, key: str, default: int, max_messages: int | None) -> int:
        if max_messages is not None and max_messages < 0:
            raise ValueError(f"max_messages must be >= 0, got {max_messages}")
        return configured_limit(self._config, key, default) if max_messages is None \
            else max_messages

    def assert_resume_safe(self, session_id: str, max_messages: int | None = None,
                           tip_only: bool = False) -> int:
        """Refuse a resume that would materialise too many rows; returns the bounded count."""
        limit = self._guard_limit("max_resume_messages", DEFAULT_MAX_RESUME_MESSAGES,
                                  max_messages)
        if limit == 0:
            return 0
        count = self._backend.read(lambda c: msg.bounded_count(
            c, self._q, session_id, limit + 1, lineage=not tip_only))
        if count > limit:
            scope = "in its tip segment" if tip_only else "across its lineage"
            raise SessionResumeTooLargeError(count, limit, scope)
        return count

    def assert_export_safe(self, session_id: str, max_messages: int | None = None) -> int:
        """Refuse exporting one session with more active rows than the limit; returns the count."""
        limit = self._guard_limit("max_export_messages", DEFAULT_MAX_EXPORT_MESSAGES,
                                  max_messages)
        if limit == 0:
            return 0
        count = self._backend.read(lambda c: msg.bounded_count(
            c, self._q, session_id, limit + 1, lineage=False))
        if count > limit:
            raise SessionExportTooLargeError(session_id, count, limit)
        return count

    # -- lineage (docs/sessions.md §4.4) ----------------------------------------------------------------

    def get_compression_chain(self, session_id: str) -> list[str]:
        """Ids from ``session_id`` forward to its compression tip (one statement)."""
        return self._backend.read(lambda c: lineage.chain(c, self._q, session_id))

    def get_compression_tip(self, session_id: str) -> str:
        """The live end of the compression chain through ``session_id`` (one statement)."""
        return self._backend.read(lambda c: lineage.tip(c, self._q, session_id))

    def get_compression_root(self, session_id: str) -> str:
        """The first segment of the compression chain holding ``session_id`` (one statement)."""
        return self._backend.read(lambda c: lineage.root(c, self._q, session_id))

    def get_lineage_ids(self, session_id: str) -> list[str]:
        """Every segment of the compression lineage of ``session_id``, root first."""
        return self._backend.read(lambda c: lineage.lineage_ids(c, self._q, session_id))

    def get_resume_lineage_ids(self, session_id: str) -> list[str]:
        """The compression path root … ``session_id`` (what a full resume materialises)."""
        return self._backend.read(lambda c: lineage.resume_lineage_ids(c, self._q, session_id))

    def resolve_resume_session_id(self, session_id: str) -> str:
        """Where resuming ``session_id`` lands: the tip, or a newer non-fork continuation."""
        return self._backend.read(lambda c: lineage.resume_target(c, self._q, session_id))

    # -- titles (docs/sessions.md §4.5; the flags are core/api.py's LineageAPI) --------------------

    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """User title write (rank ``user``); None/blank clears. Returns whether a row changed
        (False for an unknown session, as upstream)."""
        cleaned = enc.sanitize_title(title)
        return _write_checked(self._backend, lambda c: titles.set_title(
            c, self._q, session_id, cleaned, titles.TITLE_SOURCE_USER), session_id=session_id)

    def set_auto_title(self, session_id: str, title: str | None, source: str) -> bool:
        """Automatic title (``derived``/``llm``): lands only on untitled or lower-ranked rows."""
        if source not in (titles.TITLE_SOURCE_DERIVED, titles.TITLE_SOURCE_LLM):
            raise ValueError(f"automatic title source must be 'derived' or 'llm', not {source!r}")
        cleaned = enc.sanitize_title(title)
        if cleaned is None:
            return False
        return _write_checked(self._backend, lambda c: titles.set_title(
            c, self._q, session_id, cleaned, source), session_id=session_id)

    def get_next_title_in_lineage(self, base: str = UNSET, *, base_title: str = UNSET) -> str:
        """Next numbered title: ``base`` when unused, else ``base #(max(N, 1) + 1)``.
        ``base_title=`` is upstream's name for ``base`` (either, not both)."""
        text = either_spelling("base", base, "base_title", base_title)
        return self._backend.read(lambda c: titles.next_title_in_lineage(c, self._q, text))

    def get_session_by_title(self, title: str) -> SessionRow | None:
        """The session holding exactly ``title`` (None for a title no row can hold)."""
        if storable.no_row_holds(title):
            return None
        sid = self._backend.read(lambda c: titles.session_by_title(c, self._q, title))
        return None if sid is None else self.get_session(sid)

    def resolve_session_by_title(self, title: str) -> str | None:
        """Newest numbered variant ``title #N``, else the exact title's session id."""
        if storable.no_row_holds(title):
            return None
        return self._backend.read(lambda c: titles.resolve_by_title(c, self._q, title))

    # -- reads (docs/sessions.md §5) --------------------------------------------------------------------

    def get_session(self, session_id: str) -> SessionRow | None:
        """Core columns plus the resolved system prompt, or None (queued tokens flushed first;
        None too for an id no row can have: NUL or a lone surrogate, issue 31)."""
        if storable.no_row_holds(session_id):
            return None
        self._tokens.flush()
        return self._backend.read_driver(
            lambda tx: listing.get_session(tx.execute, self._q, session_id),
            single_statement=True)

    def list_sessions(self, *, source: str | None = None, sources: Iterable[str] | None = None,
                      exclude_sources: Iterable[str] | None = None, cwd_prefix: str | None = None,
                      session_key: str | None = None, min_message_count: int = 0,
                      include_children: bool = False, include_archived: bool = False,
                      archived_only: bool = False, include_hidden: bool = False,
                      include_pinned: bool = False, project_compression_tips: bool = True,
                      order_by_last_active: bool = False, search_query: str | None = None,
                      id_query: str | None = None, limit: int = 20,
                      offset: int = 0) -> list[SessionListRow]:
        """Conversations for a sidebar: one row per lineage, projected onto its tip (docs/sessions.md §5.2)."""
        flt = SessionFilter.of(
            source, sources, exclude_sources, cwd_prefix=cwd_prefix, session_key=session_key,
            min_message_count=min_message_count, include_children=include_children,
            include_archived=include_archived, archived_only=archived_only,
            include_hidden=include_hidden)
        return self._backend.read(lambda c: listing.list_sessions(
            c, self._q, flt, include_pinned=include_pinned,
            project_compression_tips=project_compression_tips,
            order_by_last_active=order_by_last_active, search_query=search_query,
            id_query=id_query, limit=limit, offset=offset))

    def session_count(self, *, source: str | None = None, sources: Iterable[str] | None = None,
                      exclude_sources: Iterable[str] | None = None, cwd_prefix: str | None = None,
                      session_key: str | None = None, min_message_count: int = 0,
                      exclude_children: bool = True, include_archived: bool = False,
                      archived_only: bool = False, include_hidden: bool = False) -> int:
        """Count with the ``list_sessions`` WHERE so "load more" totals match the pages;
        ``exclude_children=False`` counts every row, delegate runs too (as upstream)."""
        flt = SessionFilter.of(
            source, sources, exclude_sources, cwd_prefix=cwd_prefix, session_key=session_key,
            min_message_count=min_message_count, include_children=not exclude_children,
            include_archived=include_archived, archived_only=archived_only,
            include_hidden=include_hidden)
        return self._backend.read(lambda c: listing.session_count(c, flt, self._q.dialect))

    def session_count_ge(self, n: int) -> bool:
        """True when the store holds at least ``n`` sessions (bounded: reads at most n rows)."""
        if n <= 0:
            return True
        return self._backend.read(lambda c: listing.session_count_ge(c, self._q, n))

    def list_recent_sessions_bounded(self, limit: int = 20,
                                     exclude_sources: Iterable[str] | None = None,
                                     timeout_seconds: float = 3.0,
                                     candidate_limit: int | None = None,
                                     lineage_limit: int | None = None) -> list[RecentSessionRow]:
        """Latency-bounded recent browse (docs/sessions.md §5.3): one statement, interrupted past the deadline
        with :class:`TimeoutError` (never a partial list)."""
        limit = max(1, int(limit))
        cand = candidate_limit if candidate_limit is not None else max(128, 8 * limit)
        cand = min(max(cand, limit), 2048)
        lin = lineage_limit if lineage_limit is not None else min(8192, 8 * cand)
        lin = min(max(lin, cand), 8192)
        excluded = list(exclude_sources or [])
        try:
            return self._backend.read_bounded(lambda c: listing.recent_sessions(
                c, self._q, limit=limit, excluded=excluded, candidates=cand,
                lineage_rows=lin), timeout_seconds)
        except TimeoutError as exc:
            raise TimeoutError(f"recent-session browse exceeded {timeout_seconds} s") from exc

    # -- search (docs/sessions.md §7.1–§7.3) ------------------------------------------------------------

    def search_messages(self, query: str | None, source_filter: Iterable[str] | None = None,
                        exclude_sources: Iterable[str] | None = None,
                        role_filter: Iterable[str] | None = None, limit: int = 20,
                        offset: int = 0, sort: str | None = None,
                        include_inactive: bool = False,
                        fields: Sequence[str] | None = None,
                        include_reasoning: bool = False) -> list["SearchResult"]:
        """Full-text search over messages; never raises for any query text (see
        :func:`hermes_data.sessions.search.messages.search_messages`); ``include_reasoning`` searches
        assistant reasoning too (the LIKE route, docs/sessions-ui.md §4.9)."""
        from hermes_data.sessions.search.messages import search_messages

        if include_reasoning:
            from hermes_data.sessions.search.reasoning import search_with_reasoning as search_messages
        return self._backend.read(lambda c: search_messages(
            c, query, source_filter=source_filter, exclude_sources=exclude_sources,
            role_filter=role_filter, limit=limit, offset=offset, sort=sort,
            include_inactive=include_inactive, fields=fields))


registry.register_store_class(SessionStore)


def reconcile_state_schema(target: Any) -> None:
    """Bring the session store at ``target`` — a path, a URL or an open ``SessionStore`` —
    to the head through the writable-open path (Alembic to head, adoption, FTS checks), then
    close what was opened here. A read-only store ⇒ ``ConfigurationError``; anything else (a
    raw DB-API connection) ⇒ ``TypeError``: DDL outside the history is refused.

    The async delegation tool owns the rows of ``async_delegations`` but never its shape: its
    own DDL once added ``origin_session_id`` as bare nullable TEXT, so the shape depended on
    which opened the file first; it calls this instead (docs/sessions-gateway.md §3.10)."""
    if isinstance(target, SessionStore):
        if target.read_only:
            raise ConfigurationError(
                f"{target.path}: reconcile_state_schema needs a writable store handle")
        where: Any = target.url if target.engine.dialect.name != "sqlite" else target.path
    elif isinstance(target, (str, os.PathLike, URL)):
        where = target
    else:
        raise TypeError("reconcile_state_schema takes a path, a URL or a SessionStore, not "
                        f"{type(target).__name__} (no DDL outside the store's history)")
    with SessionStore(where):
        log.debug("session store schema reconciled at %s", where)
