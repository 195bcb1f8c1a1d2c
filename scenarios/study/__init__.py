"""studies — many runs of a scenario: parameter sweeps, comparisons, strategy search."""
