"""simcore — the engine: SimPy environment, max-min flow network, tracing, units, errors.

Knows nothing of GPUs or DNNs; every layer above builds on it.
"""
