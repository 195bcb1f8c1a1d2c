"""scenarios — the top of the stack: scenario files, runs, reports, the ``distsim`` CLI."""
