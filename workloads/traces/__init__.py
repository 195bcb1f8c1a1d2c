"""traces — workloads built from measurements.

The replay of a measured job with its collectives re-simulated (``replay``), Chakra
execution traces in and out (``chakra``, ``chakra_export``) and cost tables measured from
profiler traces (``measured_costs``).  Depends on ``iteration`` and the tiers below it, and
on ``measured``; never on ``job``.
"""
