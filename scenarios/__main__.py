"""``python -m distsim_gpu.scenarios`` runs the distsim command line."""

import sys

from distsim_gpu.scenarios.cli.main import main

sys.exit(main())
