"""hermes_data.sessions.storage."""
