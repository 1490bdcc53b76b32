"""hermes_data.sessions.coordination."""
