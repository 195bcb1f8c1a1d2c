"""workloads — what a training job asks of the cluster, and one iteration of it simulated.

* The job: transformer specs with parameter and FLOP counts (:class:`ModelSpec`), GPU
  datasheets (:class:`GpuSpec`), the parallel strategy and its placement on ranks
  (:class:`ParallelConfig`, :class:`TrainingConfig`), per-layer compute costs from a
  roofline model or a cost table (:class:`RooflineCosts`, :class:`TableCosts`; a layer
  profiled with :func:`profile_layer`) and memory per GPU under 3D parallelism, ZeRO/FSDP
  and recomputation (:func:`memory_per_gpu`).
* The iteration: :func:`simulate_iteration` turns an :class:`IterationSpec` into every
  rank group's stream of compute, collectives and pipeline sends, runs it on the
  cluster's flow network and returns an :class:`IterationResult` (per-GPU times, the
  critical path).
* Other workload generators, imported from their modules (so that the iteration does not
  load the trace readers): :mod:`~distsim_gpu.workloads.replay` replays a measured job
  from its profiler traces with the collectives re-simulated, and
  :mod:`~distsim_gpu.workloads.measured_costs` measures a cost table from traces.
* :mod:`~distsim_gpu.workloads.runtime` is the SimPy API for writing a workload by hand.
* When things go wrong and jobs share (issue 15), also from their modules:
  :mod:`~distsim_gpu.workloads.jobs` runs several jobs on one flow network (and one job
  under faults timed during its run), :mod:`~distsim_gpu.workloads.stragglers` draws slow
  GPUs from distributions and measures their cost by dimension, and
  :mod:`~distsim_gpu.workloads.goodput` samples failures over a whole job against the
  checkpoint interval.

Depends on ``simcore``, ``topology`` and ``collectives``; the replay and the measured cost
tables also on ``measured``.
"""

from distsim_gpu.workloads.costs import (
    PASSES,
    CostModel,
    CostRow,
    Kernel,
    LayerWork,
    RooflineCosts,
    TableCosts,
    TableHeader,
    forward_layer_work,
    layer_work,
    matmul_efficiency,
    read_cost_table,
    write_cost_table,
)
from distsim_gpu.workloads.gpus import (
    GPU_PRESETS,
    GpuSpec,
    canonical_gpu_name,
    get_gpu,
    gpu_from_mapping,
    list_gpus,
)
from distsim_gpu.workloads.iteration import (
    GpuTimes,
    IterationResult,
    IterationSpec,
    simulate_iteration,
)
from distsim_gpu.workloads.memory import (
    MemoryBreakdown,
    StageParams,
    activation_bytes_per_layer,
    memory_per_gpu,
    microbatches_in_flight,
    params_on_gpu,
    stage_layers,
)
from distsim_gpu.workloads.models import (
    MODEL_PRESETS,
    ModelSpec,
    get_model,
    list_models,
    model_from_mapping,
)
from distsim_gpu.workloads.parallel import (
    ParallelConfig,
    Placement,
    TrainingConfig,
    check_strategy,
    parallel_from_mapping,
    training_from_mapping,
)
from distsim_gpu.workloads.profile_layer import LayerTiming, profile_layer
from distsim_gpu.workloads.runtime import Cluster, Gpu, KernelRecord, Stream

__all__ = [
    "GPU_PRESETS",
    "MODEL_PRESETS",
    "PASSES",
    "Cluster",
    "CostModel",
    "CostRow",
    "Gpu",
    "GpuSpec",
    "GpuTimes",
    "IterationResult",
    "IterationSpec",
    "Kernel",
    "KernelRecord",
    "LayerTiming",
    "LayerWork",
    "MemoryBreakdown",
    "ModelSpec",
    "ParallelConfig",
    "Placement",
    "RooflineCosts",
    "StageParams",
    "Stream",
    "TableCosts",
    "TableHeader",
    "TrainingConfig",
    "activation_bytes_per_layer",
    "canonical_gpu_name",
    "check_strategy",
    "forward_layer_work",
    "get_gpu",
    "get_model",
    "gpu_from_mapping",
    "layer_work",
    "list_gpus",
    "list_models",
    "matmul_efficiency",
    "memory_per_gpu",
    "microbatches_in_flight",
    "model_from_mapping",
    "parallel_from_mapping",
    "params_on_gpu",
    "profile_layer",
    "read_cost_table",
    "simulate_iteration",
    "stage_layers",
    "training_from_mapping",
    "write_cost_table",
]
