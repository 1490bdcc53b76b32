"""Every revision of both histories refuses a downgrade the same way: ``ForwardOnlyError``
with its one wording (issue 32, item 4) — checked on each revision's own ``downgrade()``, and
through Alembic on a store at the head on both dialects."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.script import ScriptDirectory

from hermes_data.errors import ForwardOnlyError
from hermes_data.migrate import runner as migrate


def _revisions(store: str):
    script = ScriptDirectory(str(migrate.script_location(migrate.store_spec(store))))
    return list(script.walk_revisions())


@pytest.mark.journal_independent("imports the revision scripts; no database")
@pytest.mark.parametrize("store", ["telemetry", "sessions"])
def test_each_revision_refuses_a_downgrade_with_the_forward_only_wording(store):
    revisions = _revisions(store)
    assert len(revisions) == (18 if store == "telemetry" else 10)
    for rev in revisions:
        with pytest.raises(ForwardOnlyError) as refused:
            rev.module.downgrade()
        assert str(refused.value) == (f"revision {rev.revision} cannot be downgraded: "
                                      "the history is forward-only")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("store", ["telemetry", "sessions"])
def test_a_downgrade_from_the_head_is_refused_and_changes_nothing(store, backend, tmp_path,
                                                                   request):
    url = (str(tmp_path / f"{store}.db") if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    migrate.upgrade(store, url)
    head = migrate.head_revision(store)
    with pytest.raises(ForwardOnlyError, match=f"revision {head} cannot be downgraded"):
        command.downgrade(migrate.alembic_config(store, url), "-1")
    assert migrate.status(store, url).revision == head
