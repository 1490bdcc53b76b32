"""hermes_data.sessions.agent."""
