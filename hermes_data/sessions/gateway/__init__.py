"""hermes_data.sessions.gateway."""
