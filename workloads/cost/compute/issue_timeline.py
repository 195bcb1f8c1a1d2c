"""When the GPU finishes a pass whose kernels an eager host issues one by one.

The roofline (:mod:`~distsim_gpu.workloads.cost.compute.roofline`) and the profiled cost
tables (:mod:`~distsim_gpu.workloads.cost.compute.table_costs`) both time a pass as its
kernels on the GPU, each no earlier than the host has launched it: an eager framework's CPU
issues kernels ahead of the GPU until kernels get shorter than its per-kernel dispatch
time, and then the GPU waits for it.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["issue_timeline_s"]


def issue_timeline_s(operators: Iterable[tuple[float, int]], host_s_per_kernel: float) -> float:
    """When the GPU finishes a pass whose kernels an eager host issues one by one.

    ``operators``: (device seconds, kernels) in order, the device time spread evenly over
    the operator's kernels.  The host issues kernel j at ``j · host_s_per_kernel`` after
    the pass starts; the GPU runs it from ``max(previous kernel's end, its issue)``.  So a
    pass of long kernels takes their sum (the host runs ahead), one of short kernels the
    host's issue time plus the last kernel — neither alone, where the two mix.  For n
    equal kernels of d seconds issued every h from (host t_h, GPU t_g) the last ends at
    ``max(t_g + n·d, t_h + h + n·d)`` when h ≤ d, else ``max(t_g + n·d, t_h + n·h + d)``.
    """
    host_s, gpu_s = 0.0, 0.0
    for device_s, kernels in operators:
        if kernels <= 0:
            gpu_s += device_s
            continue
        each_s = device_s / kernels
        if host_s_per_kernel <= each_s:
            gpu_s = max(gpu_s, host_s + host_s_per_kernel) + device_s
        else:
            gpu_s = max(gpu_s + device_s, host_s + kernels * host_s_per_kernel + each_s)
        host_s += kernels * host_s_per_kernel
    return gpu_s
