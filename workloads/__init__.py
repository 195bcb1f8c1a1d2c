"""workloads — models, GPUs, compute costs and memory: what one training iteration asks of a GPU.

Pure, deterministic foundations of the per-GPU op streams: transformer specs with
parameter and FLOP counts (:mod:`workloads.models`), GPU datasheets
(:mod:`workloads.gpus`), per-layer compute costs from a roofline model or a profiled table
(:mod:`workloads.costs`, :mod:`workloads.profile_layer`) and memory per GPU under 3D
parallelism, ZeRO/FSDP and recomputation (:mod:`workloads.memory`).  Depends only on
``simcore``.
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
    "Kernel",
    "KernelRecord",
    "LayerTiming",
    "LayerWork",
    "MemoryBreakdown",
    "ModelSpec",
    "RooflineCosts",
    "StageParams",
    "Stream",
    "TableCosts",
    "TableHeader",
    "activation_bytes_per_layer",
    "canonical_gpu_name",
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
    "params_on_gpu",
    "profile_layer",
    "read_cost_table",
    "stage_layers",
    "write_cost_table",
]
