"""Fault injection at every write position (issue 31; docs/development.md "Fault matrix")."""
