"""hermes_data.sessions.search.messages."""
