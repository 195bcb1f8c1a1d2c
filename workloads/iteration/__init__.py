"""iteration — one training iteration, simulated.

Typed op streams (``ops``) built per rank group (``streams``, with ZeRO-offload's optimizer
step in ``offload_step``), run on the cluster's flow network (``simulator``), and turned into
a timeline with its critical path (``timeline``); ``runtime`` is the SimPy API for writing a
workload by hand.  Depends on ``specs``, ``strategy`` and ``cost``.
"""
