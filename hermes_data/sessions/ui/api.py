"""The user-interface API's public ``SessionStore`` methods (docs/sessions-ui.md §4), as
one declarative delegation table (:mod:`hermes_data.sessions.handle`): each entry maps a public
name to an operation function (store first) in a module by concern (:mod:`.display`, …);
the class holds no state and no logic, and ``SessionStore`` inherits it.
"""

from __future__ import annotations

from hermes_data.sessions.core import display_order as display
from hermes_data.sessions.ui.portability import export
from hermes_data.sessions.ui.portability import imports
from hermes_data.sessions.sql import markers
from hermes_data.sessions.ui import pickers
from hermes_data.sessions.ui import reactions
from hermes_data.sessions.ui.portability import render
from hermes_data.sessions.ui import rich
from hermes_data.sessions.ui import views
from hermes_data.sessions.handle import Op, static


class UiAPI:
    """The delegation table (see the module docstring)."""

    # -- display ordering (docs/sessions-ui.md §3.4, §4.14)
    ensure_display_order = Op(display.ensure_display_order)
    backfill_display_order = Op(display.backfill_display_order)
    _split = Op(display.store_split)

    # -- transcript windows (docs/sessions-ui.md §4.1–§4.4)
    get_messages_around = Op(views.get_messages_around)
    get_anchored_view = Op(views.get_anchored_view)
    list_recent_user_messages = Op(views.list_recent_user_messages)
    find_pr_url_messages = Op(views.find_pr_url_messages)

    # -- reactions (docs/sessions-ui.md §4.10; the targets are the agent API's row helpers)
    REACTIONS_METADATA_KEY = reactions.REACTIONS_METADATA_KEY  # upstream's class constant
    set_message_reaction = Op(reactions.set_message_reaction)
    get_message_reactions = Op(reactions.get_message_reactions)
    take_unseen_reactions = Op(reactions.take_unseen_reactions)

    # -- portability (docs/sessions-ui.md §4.11–§4.12)
    export_session = Op(export.export_session)
    export_session_lineage = Op(export.export_session_lineage)
    iter_export_all = Op(export.iter_export_all)
    export_all = Op(export.export_all)
    import_sessions = Op(imports.import_sessions)
    load_import_payload = static(imports.load_import_payload)
    normalize_save_format = static(render.normalize_save_format)
    render_session_for_save = static(render.render_session_for_save)
    default_save_filename = static(render.default_save_filename)
    describe_skill_invocation = static(markers.describe_skill_invocation)
    shape_preview = static(markers.shape_preview)

    # -- pickers (docs/sessions-ui.md §3.5, §4.7)
    search_sessions = Op(pickers.search_sessions)
    search_sessions_by_id = Op(pickers.search_sessions_by_id)
    list_sessions_rich = Op(rich.list_sessions_rich)
    get_session_rich_row = Op(rich.get_session_rich_row)
    get_session_extra = Op(rich.get_session_extra)
    workspace_key = static(pickers.workspace_key)
