"""Compute costs: how long a transformer layer's operators take on one GPU.

A cost model answers "how many seconds does pass P (``fwd``, ``bwd``, ``recompute``) of one
transformer layer take on one tensor-parallel rank", plus the embedding, the loss (final
norm, logits GEMM, cross entropy) and the optimizer step.  One job per module:

* :mod:`.stacks` — software stacks (``compute.stack``): which kernels a framework version
  runs and fuses, and its few physical efficiency figures;
* :mod:`.fp8_recipes` — FP8 recipes (``training.fp8_recipe``): the casts, amax passes
  and scales each adds to FP8 GEMMs, and the block-scaled weight-gradient rate;
* :mod:`.operators` — a layer's operators for a stack, with FLOP and bytes, and the
  backward and recompute passes derived from the forward;
* :mod:`.roofline` — :class:`RooflineCosts`: each operator at its compute or memory
  roofline plus launches, GEMM efficiency by tiles and waves, the optimizer step;
  the :class:`CostModel` protocol;
* :mod:`.table_io` and :mod:`.table_costs` — profiled cost tables (per layer or per
  operator) and :class:`TableCosts`, which reads them with the roofline filling gaps.
"""

from distsim_gpu.workloads.cost.compute.attention_rates import (
    ATTENTION_EFFICIENCY,
    ATTENTION_EFFICIENCY_BY_KERNEL,
    ATTENTION_REFERENCE_SHAPE,
    attention_efficiency,
    attention_shape_factor,
)
from distsim_gpu.workloads.cost.compute.cross_entropy import CROSS_ENTROPY, CrossEntropy
from distsim_gpu.workloads.cost.compute.fp8_recipes import (
    FP8_RECIPE_SPECS,
    FP8_RECIPES,
    Fp8Recipe,
    fp8_recipe,
)
from distsim_gpu.workloads.cost.compute.operators import (
    CORE_ATTENTION_KERNELS,
    FLASH_ATTENTION_BWD_FLOP_RATIO,
    PASSES,
    RECOMPUTE_GRANULARITIES,
    Kernel,
    LayerWork,
    Operator,
    bytes_per_element,
    forward_layer_work,
    layer_work,
)
from distsim_gpu.workloads.cost.compute.roofline import (
    ADAM_BYTES_PER_PARAM,
    DEFAULT_GEMM_TILES,
    GEMM_K_HALF,
    LAUNCH_OVERHEAD_S,
    MATMUL_EFFICIENCY,
    MATMUL_EFFICIENCY_BY_ARCHITECTURE,
    MEMORY_EFFICIENCY,
    CostModel,
    RooflineCosts,
    activation_storage,
    matmul_efficiency,
    roofline_behind,
    saved_formats,
    saved_linear_input_bytes,
    stores_attention_scores,
)
from distsim_gpu.workloads.cost.compute.stacks import (
    ATTENTION_IMPLEMENTATIONS,
    DEFAULT_STACK,
    STACKS,
    Stack,
    get_stack,
)
from distsim_gpu.workloads.cost.compute.table_costs import TableCosts
from distsim_gpu.workloads.cost.compute.table_io import (
    TABLE_PASSES,
    CostRow,
    TableHeader,
    read_cost_table,
    write_cost_table,
)

__all__ = [
    "ADAM_BYTES_PER_PARAM",
    "ATTENTION_EFFICIENCY",
    "ATTENTION_EFFICIENCY_BY_KERNEL",
    "ATTENTION_IMPLEMENTATIONS",
    "ATTENTION_REFERENCE_SHAPE",
    "CORE_ATTENTION_KERNELS",
    "CROSS_ENTROPY",
    "DEFAULT_GEMM_TILES",
    "DEFAULT_STACK",
    "FLASH_ATTENTION_BWD_FLOP_RATIO",
    "FP8_RECIPES",
    "FP8_RECIPE_SPECS",
    "GEMM_K_HALF",
    "LAUNCH_OVERHEAD_S",
    "MATMUL_EFFICIENCY",
    "MATMUL_EFFICIENCY_BY_ARCHITECTURE",
    "MEMORY_EFFICIENCY",
    "PASSES",
    "RECOMPUTE_GRANULARITIES",
    "STACKS",
    "TABLE_PASSES",
    "CostModel",
    "CostRow",
    "CrossEntropy",
    "Fp8Recipe",
    "Kernel",
    "LayerWork",
    "Operator",
    "RooflineCosts",
    "Stack",
    "TableCosts",
    "TableHeader",
    "activation_storage",
    "attention_efficiency",
    "attention_shape_factor",
    "bytes_per_element",
    "forward_layer_work",
    "fp8_recipe",
    "get_stack",
    "layer_work",
    "matmul_efficiency",
    "read_cost_table",
    "roofline_behind",
    "saved_formats",
    "saved_linear_input_bytes",
    "stores_attention_scores",
    "write_cost_table",
]
