"""Alembic environment of the telemetry store: everything lives in hermes_data.migrate."""

from hermes_data.migrate import run_env

run_env("telemetry")
