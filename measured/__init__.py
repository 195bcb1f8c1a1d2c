"""measured — readers of what real runs leave behind: profiler traces and nccl-tests logs.

* :mod:`~distsim_gpu.measured.records` — the record types every trace format is read
  into: :class:`RankTrace` (one GPU's run), :class:`ProfilerStep`, :class:`GpuEvent`
  (kernel, memcpy, memset), :class:`CpuEvent`.
* :mod:`~distsim_gpu.measured.traces` — the one loader: :func:`load_traces` reads files,
  ``.json.gz``, tar archives and folders, and picks each document's format (PyTorch
  profiler / Kineto, or distsim's own trace.json) by ``otherData.generator``;
  :func:`read_traces` says per document which format it was.
* :mod:`~distsim_gpu.measured.kineto` and :mod:`~distsim_gpu.measured.distsim_trace` —
  the two formats; :mod:`~distsim_gpu.measured.jsonstream` — the streaming JSON scan
  they are fed from.
* :mod:`~distsim_gpu.measured.summary` — per-rank, per-step busy/idle/overlap breakdown.
* :mod:`~distsim_gpu.measured.nccl_log` — nccl-tests logs as :class:`NcclLog`.

Depends on ``simcore`` only.
"""

from distsim_gpu.measured.distsim_trace import DistsimTrace
from distsim_gpu.measured.nccl_log import NcclLog, NcclRow, parse_nccl_log
from distsim_gpu.measured.records import CpuEvent, GpuEvent, ProfilerStep, RankTrace
from distsim_gpu.measured.summary import StepSummary, summarise
from distsim_gpu.measured.traces import (
    TraceFile,
    load_trace_file,
    load_traces,
    read_trace_file,
    read_traces,
)

__all__ = [
    "CpuEvent",
    "DistsimTrace",
    "GpuEvent",
    "NcclLog",
    "NcclRow",
    "ProfilerStep",
    "RankTrace",
    "StepSummary",
    "TraceFile",
    "load_trace_file",
    "load_traces",
    "parse_nccl_log",
    "read_trace_file",
    "read_traces",
    "summarise",
]
