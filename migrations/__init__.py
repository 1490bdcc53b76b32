"""The Alembic environments of hermes-data: ``telemetry/`` and ``sessions/``.

This directory sits at the top of the repository (``alembic.ini`` points here) and is
shipped in the wheel as the package ``hermes_data.migrations`` (setuptools ``package-dir``
mapping in pyproject.toml), so code finds it the same way in a checkout, an editable
install and an installed wheel: ``importlib.resources.files("hermes_data.migrations")``.
It holds no code of its own; Alembic loads ``env.py`` and ``versions/`` by path.
"""
