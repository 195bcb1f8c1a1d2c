"""The ``distsim`` command line: one module per command, one options module.

:func:`distsim_gpu.scenarios.cli.main.main` is the entry point.  This ``__init__`` imports
nothing, so that ``main`` can import its sibling command modules through the package
without closing a loop.
"""
