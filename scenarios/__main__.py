"""``python -m scenarios`` runs the distsim command line."""

import sys

from scenarios.cli import main

sys.exit(main())
