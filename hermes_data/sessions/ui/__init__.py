"""hermes_data.sessions.ui."""
