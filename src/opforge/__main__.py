"""``python -m opforge`` runs the CLI."""

import sys

from opforge.cli import main

sys.exit(main())
