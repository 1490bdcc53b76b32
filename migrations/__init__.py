"""The Alembic environments of hermes-data: ``telemetry/`` and ``sessions/``.

This directory sits at the top of the repository (``alembic.ini`` points here) and is
copied into the wheel as the package ``hermes_data.migrations`` (the build step in setup.py).
``hermes_data.migrate.runner`` finds it by path: ``hermes_data/migrations`` in an installed
wheel, else this directory beside the ``hermes_data`` package (a checkout or an editable install).
It holds no code of its own; Alembic loads ``env.py`` and ``versions/`` by path.
"""
