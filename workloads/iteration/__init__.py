"""iteration — one training iteration, simulated.

Typed op streams (``ops``) built per rank group (``streams``, with ZeRO-offload's optimizer
step in ``offload_step``), run on the cluster's flow network (``simulator``, over the rank
groups of ``rank_groups``, from and to the records of ``records``), with the replicas that
are alike folded into one (``folding``), and turned into a timeline with its critical path
(``timeline``; a trace's extras in ``tracing``); ``runtime`` is the SimPy API for writing a
workload by hand.  Depends on ``specs``, ``strategy`` and ``cost``.
"""
