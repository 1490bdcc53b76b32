"""hermes_data.sessions.storage.fts."""
