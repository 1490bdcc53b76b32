"""hermes_data.sessions.ui.portability."""
