"""Alembic environment of the session store: everything lives in hermes_data.migrate.runner."""

from hermes_data.migrate.runner import run_env

run_env("sessions")
