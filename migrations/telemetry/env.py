"""Alembic environment of the telemetry store: everything lives in hermes_data.migrate.runner."""

from hermes_data.migrate.runner import run_env

run_env("telemetry")
