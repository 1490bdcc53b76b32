"""hermes_data.sessions.storage.repair."""
