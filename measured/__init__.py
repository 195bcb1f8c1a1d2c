"""measured — readers of what real runs leave behind: profiler traces and nccl-tests logs.

Kineto (PyTorch profiler) traces and distsim's own ``trace.json`` become
:class:`~distsim_gpu.measured.kineto.RankTrace` records; nccl-tests logs become
:class:`~distsim_gpu.measured.nccl_log.NcclLog`.  Depends on ``simcore`` only.
"""
