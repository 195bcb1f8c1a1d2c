"""A scenario's ``compute:`` section: which GPU, and how its kernels are costed.

The section names the GPU (a preset or a mapping; default the cluster's), the cost model
(``costs``: the roofline, or a measured cost table that falls back on it), the software
stack, and the roofline's knobs (:data:`ROOFLINE_KNOBS`).  :func:`gpu_of` and
:func:`roofline_of` parse it into typed objects, each key checked and named by its dotted
path on errors; :func:`resolved_compute` writes it back with every default filled in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from distsim_gpu.simcore.config import check_bool, check_choice, number_text_hint
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.units import parse_duration
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.cost.compute import (
    ATTENTION_IMPLEMENTATIONS,
    CROSS_ENTROPY,
    DEFAULT_STACK,
    STACKS,
    RooflineCosts,
    get_stack,
)
from distsim_gpu.workloads.cost.compute.kernel_fits import kernel_fit_notes
from distsim_gpu.workloads.specs.gpus import GpuSpec, get_gpu, gpu_from_mapping
from distsim_gpu.workloads.strategy.precision import check_fp8_recipe

__all__ = ["COMPUTE_KEYS", "ROOFLINE_KNOBS", "gpu_of", "resolved_compute", "roofline_of"]

#: compute key -> RooflineCosts field.
ROOFLINE_KNOBS = {
    "matmul_efficiency": "matmul_asymptotic_efficiency",
    "attention_efficiency": "attention_efficiency",
    "memory_efficiency": "memory_efficiency",
    "launch_overhead": "launch_overhead_s",
    "host_overhead": "host_overhead_s",
    "gemm_tiles": "gemm_tiles",
    "gemm_k_half": "gemm_k_half",
    "causal": "causal",
    "optimizer_bytes_per_param": "optimizer_bytes_per_param",
    "attention": "attention",
    "cross_entropy": "cross_entropy",
    "comm_sms": "comm_sms",
    "cuda_graphs": "cuda_graphs",
}
COMPUTE_KEYS = ("gpu", "costs", "stack", *ROOFLINE_KNOBS)


def resolved_compute(gpu: GpuSpec, roofline: RooflineCosts, cost_table: str | None,
                     with_assumed: bool = False) -> dict[str, Any]:
    """The section as :meth:`scenarios.scenario.Scenario.resolved` writes it: every
    default filled in, SI units, the cost table's path or ``roofline``; but for the kernel
    rates a run notes as taken from another GPU or the generic figure
    (:func:`~workloads.cost.compute.kernel_fits.kernel_fit_notes`), which stay out unless
    ``with_assumed``, so that the file read back notes them again."""
    compute: dict[str, Any] = {
        "gpu": {"name": gpu.name, "peak_flops": dict(gpu.peak_flops_per_s),
                "memory": gpu.memory_bytes,
                "memory_bandwidth": gpu.memory_bandwidth_bytes_per_s,
                "sm_count": gpu.sm_count,
                **{key: value for key, value in (("architecture", gpu.architecture),
                                                 ("tdp", gpu.tdp_w),
                                                 ("power_limit", gpu.power_limit_w))
                   if value}},
        "costs": cost_table or "roofline",
    }
    for knob, attr in ROOFLINE_KNOBS.items():
        value = getattr(roofline, attr)
        compute[knob] = [list(t) for t in value] if knob == "gemm_tiles" else value
    compute["attention"] = roofline.resolved_stack.attention
    compute["cross_entropy"] = roofline.resolved_stack.cross_entropy
    compute["matmul_efficiency"] = roofline.resolved_matmul_efficiency
    compute["attention_efficiency"] = roofline.resolved_attention_efficiency
    compute["memory_efficiency"] = roofline.resolved_memory_efficiency
    compute["gemm_k_half"] = roofline.resolved_gemm_k_half
    compute["host_overhead"] = roofline.resolved_stack.host_overhead_s
    if roofline.resolved_stack.cuda_graphs:  # named only when on: resolved files stay
        compute["cuda_graphs"] = True
    else:
        del compute["cuda_graphs"]
    compute["stack"] = roofline.stack.name
    for note in () if with_assumed else kernel_fit_notes(roofline):
        compute.pop(str(note.key).removeprefix("compute."), None)
    return compute


#: The fields a ``compute.gpu`` mapping without a preset must give to describe a GPU whole.
WHOLE_GPU_KEYS = ("peak_flops", "memory", "memory_bandwidth", "sm_count")


def gpu_of(raw: Any, topology: Topology, source: str | None) -> GpuSpec:
    """``compute.gpu`` (a preset name or a mapping), else the cluster's GPU when it is a
    known spec.  A mapping without ``preset`` that does not describe a whole GPU starts
    from the cluster's GPU, so that ``--set compute.gpu.memory_bandwidth=...`` on a
    scenario that leaves the GPU to the cluster is the what-if it reads as."""
    model = str(topology.config.get("gpu", {}).get("model", ""))
    if isinstance(raw, Mapping) and "preset" not in raw and model and not all(
            key in raw for key in WHOLE_GPU_KEYS):
        try:
            get_gpu(model)
        except ConfigError:
            pass  # not a known spec: the mapping's own "missing ..." error says what to give
        else:
            raw = {"preset": model, **raw}
    if raw is not None:
        return gpu_from_mapping(raw, source=source, prefix="compute.gpu")
    hint = "e.g. compute: {gpu: a100-80gb}"
    if model:
        try:
            return get_gpu(model)
        except ConfigError as unknown:
            hint = f"{hint}; for the cluster's gpu.model: {unknown.hint}"
    what = f"the cluster's GPU {model[:60]!r} is not a known GPU spec" if model else (
        "the cluster does not say which GPU it has")
    raise ConfigError(f"no GPU given, and {what}", key="compute.gpu", source=source,
                      hint=hint)


def roofline_of(compute: Mapping[str, Any], gpu: GpuSpec, precision: str,
                source: str | None, fp8_recipe: str | None = None,
                optimizer_moments: str = "fp32") -> RooflineCosts:
    """The roofline cost model with the section's knobs and stack, each checked, the
    stack running ``fp8_recipe`` (``training.fp8_recipe``; None: the stack's own); errors
    name the ``compute.`` key (or ``training.precision`` / ``training.fp8_recipe``) they
    came from; ``optimizer_moments``: ``training.optimizer_moments``."""
    check_fp8_recipe(fp8_recipe, precision, source=source)
    knobs: dict[str, Any] = {}
    for knob, attr in ROOFLINE_KNOBS.items():
        if knob not in compute:
            continue
        value = compute[knob]
        key = f"compute.{knob}"
        if knob in ("launch_overhead", "host_overhead"):
            value = parse_duration(value, key=key, source=source)
        elif knob in ("causal", "cuda_graphs"):
            check_bool(value, key=key, source=source)
        elif knob == "gemm_tiles":
            value = _tiles(value, key, source)
        elif knob == "attention":
            check_choice(value, ATTENTION_IMPLEMENTATIONS, key=key, source=source,
                         what="attention implementation")
        elif knob == "cross_entropy":
            check_choice(value, CROSS_ENTROPY, key=key, source=source,
                         what="cross entropy implementation")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"must be a number, got {value!r}", key=key, source=source,
                              hint=number_text_hint(value))
        knobs[attr] = value
    stack = get_stack(compute["stack"], key="compute.stack", source=source) if (
        "stack" in compute) else STACKS[DEFAULT_STACK]
    knobs["stack"] = stack.with_fp8_recipe(fp8_recipe)
    try:
        return RooflineCosts(gpu, precision=precision, optimizer_moments=optimizer_moments,
                             **knobs)
    except ConfigError as error:
        if error.key == "precision":
            error.key = "training.precision"
            error.message = f"{gpu.name} has no {precision!r} rate"
        elif not (error.key or "").startswith("training."):  # a training key is its own
            inverse = {attr: knob for knob, attr in ROOFLINE_KNOBS.items()}
            error.key = f"compute.{inverse.get(error.key or '', error.key)}"
        error.source = source
        raise


def _tiles(value: Any, key: str, source: str | None) -> tuple[tuple[int, int, float], ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError("must be a list of [tile_m, tile_n, efficiency]", key=key,
                          source=source, hint="e.g. [[256, 128, 1.0], [128, 128, 0.95]]")
    tiles = []
    for i, tile in enumerate(value):
        ok = (isinstance(tile, (list, tuple)) and len(tile) == 3
              and all(isinstance(x, int) and not isinstance(x, bool) and x > 0
                      for x in tile[:2])
              and isinstance(tile[2], (int, float)) and not isinstance(tile[2], bool)
              and 0 < tile[2] <= 1)
        if not ok:
            raise ConfigError(f"must be [tile_m, tile_n, efficiency], got {tile!r}",
                              key=f"{key}[{i}]", source=source,
                              hint="whole tile sizes > 0 and an efficiency in (0, 1]")
        tiles.append((int(tile[0]), int(tile[1]), float(tile[2])))
    return tuple(tiles)
