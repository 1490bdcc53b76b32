"""``python -m hermes_data.cli``: the same entry point as the ``hermes-data`` script."""

import sys

from hermes_data.cli.app import main

sys.exit(main())
