"""hermes_data.sessions.core."""
