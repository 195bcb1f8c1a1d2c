"""The ``distsim`` command line: one module per command, one options module."""

from distsim_gpu.scenarios.cli.main import main

__all__ = ["main"]
