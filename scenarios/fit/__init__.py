"""fit — predictions held against measurements: calibration and validation.

* nccl-tests logs: :func:`validate_nccl_log` simulates every size of a measured log and
  reports the error (:class:`NcclValidation`); :func:`calibrate_nccl` fits the cluster's
  link efficiencies and protocol latencies to it (:class:`Calibration`).
* profiler traces: :func:`validate_traces` replays a job's traces with the collectives
  re-simulated and sets predicted against measured; :func:`calibrate_trace` fits the
  network (and, given a scenario, the GEMM efficiency) to them (:class:`TraceCalibration`).
* tables of measured training runs: :func:`validate_runs` simulates every row as a map
  says and reports errors and rank correlations, fitting the compute knobs on request
  (:class:`RunsReport`).

Builds on the scenarios core and the layers below; imports nothing of ``study`` or ``cli``.
"""

from distsim_gpu.scenarios.fit.calibrate_nccl import Calibration, calibrate_nccl
from distsim_gpu.scenarios.fit.calibrate_trace import TraceCalibration, calibrate_trace
from distsim_gpu.scenarios.fit.validate_nccl import NcclValidation, validate_nccl_log
from distsim_gpu.scenarios.fit.validate_runs import RunsReport, validate_runs
from distsim_gpu.scenarios.fit.validate_trace import validate_traces

__all__ = [
    "Calibration",
    "NcclValidation",
    "RunsReport",
    "TraceCalibration",
    "calibrate_nccl",
    "calibrate_trace",
    "validate_nccl_log",
    "validate_runs",
    "validate_traces",
]
