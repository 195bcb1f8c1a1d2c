"""workloads — what a training job asks of the cluster, and one iteration of it simulated.

One subpackage per question, each importing only those above it in this list
(``tests/test_layers.py`` holds it):

* :mod:`~distsim_gpu.workloads.specs` — what is trained and on what: transformer specs
  with parameter and FLOP counts (:class:`ModelSpec`), GPU datasheets (:class:`GpuSpec`),
  MoE routing, recomputation modes.
* :mod:`~distsim_gpu.workloads.strategy` — how it is split: the parallel strategy and its
  placement on ranks (:class:`ParallelConfig`, :class:`TrainingConfig`), n-D TP, layer
  groups, operator sharding, offload, the data loader, pipeline schedules.
* :mod:`~distsim_gpu.workloads.cost` — what it costs in closed form: per-layer compute from
  a roofline model or a cost table (:class:`RooflineCosts`, :class:`TableCosts`; a layer
  profiled with :func:`profile_layer`), memory per GPU (:func:`memory_per_gpu`), bytes on
  the wire, the iteration's lower bound.
* :mod:`~distsim_gpu.workloads.iteration` — the simulated iteration:
  :func:`simulate_iteration` turns an :class:`IterationSpec` into every rank group's stream
  of typed ops, runs it on the cluster's flow network and returns an
  :class:`IterationResult` (per-GPU times, the critical path); :class:`Cluster` is the SimPy
  API for writing a workload by hand.
* :mod:`~distsim_gpu.workloads.job` — beyond one iteration: several jobs on one flow
  network, stragglers drawn from distributions, goodput under failures.
* :mod:`~distsim_gpu.workloads.traces` — workloads from measurements: the replay of a
  measured job with its collectives re-simulated, Chakra traces in and out, cost tables
  measured from profiler traces.

The names below are the public ones; ``job`` and ``traces`` are imported from their modules
(so that the iteration does not load the trace readers).  Depends on ``simcore``,
``topology`` and ``collectives``; ``traces`` also on ``measured``.
"""

from distsim_gpu.workloads.cost.compute import (
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
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import (
    MemoryBreakdown,
    activation_bytes_per_layer,
    memory_per_gpu,
)
from distsim_gpu.workloads.cost.parameters import StageParams, params_on_gpu, stage_layers
from distsim_gpu.workloads.cost.profile_layer import LayerTiming, ProfileSettings, profile_layer
from distsim_gpu.workloads.iteration.runtime import Cluster, Gpu, KernelRecord, Stream
from distsim_gpu.workloads.iteration.simulator import (
    GpuTimes,
    IterationResult,
    IterationSpec,
    simulate_iteration,
)
from distsim_gpu.workloads.specs.gpus import (
    GPU_PRESETS,
    GpuSpec,
    canonical_gpu_name,
    get_gpu,
    gpu_from_mapping,
    list_gpus,
)
from distsim_gpu.workloads.specs.models import (
    MODEL_PRESETS,
    ModelSpec,
    get_model,
    list_models,
    model_from_mapping,
)
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    Placement,
    TrainingConfig,
    check_strategy,
    parallel_from_mapping,
    training_from_mapping,
)
from distsim_gpu.workloads.strategy.schedule import microbatches_in_flight

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
    "LayerShard",
    "LayerTiming",
    "LayerWork",
    "MemoryBreakdown",
    "ModelSpec",
    "ParallelConfig",
    "Placement",
    "ProfileSettings",
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
