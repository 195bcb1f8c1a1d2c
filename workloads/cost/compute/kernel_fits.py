"""Which GPUs the roofline's kernel rates were measured on, and the notes a run on another
GPU gets.

The roofline's GEMM, fused-attention and memory-bound rates are fractions of a GPU's
datasheet peaks fitted on kernel tables (``../shared/data/kernels``;
:mod:`~distsim_gpu.workloads.cost.compute.roofline` and
:mod:`~distsim_gpu.workloads.cost.compute.attention_rates` name each table).  GEMM and
attention figures are kept per GPU generation, memory figures per GPU, so a GPU without a
table of its own takes another GPU's figure (a B300 runs its GEMMs at the fraction B200 and
GB200 reached) or the generic one (a V100's GEMMs, an MI300X's attention).  Either moves
the answer of a comparison across GPUs, so :func:`kernel_fit_notes` says it, naming the
``compute`` knob that sets the figure.

A GPU counts as measured where it computes as a GPU the fit used does
(:func:`~distsim_gpu.workloads.specs.gpus.same_compute`: the same generation, SMs, peaks
and rated power): H200 as H100 SXM5, A100 40GB as A100 80GB, or a preset given another
name or memory.  Memory rates are never shared that way: they go by the GPU's name, as the
roofline looks them up.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.workloads.cost.compute.attention_rates import ATTENTION_EFFICIENCY_BY_KERNEL
from distsim_gpu.workloads.specs.gpus import GPU_PRESETS, GpuSpec, same_compute

if TYPE_CHECKING:
    from distsim_gpu.workloads.cost.compute.roofline import RooflineCosts

__all__ = ["ATTENTION_FITTED_ON", "MATMUL_FITTED_ON", "MEMORY_FITTED_ON", "kernel_fit_notes"]

#: GPU generation -> the GPU presets whose GEMM tables its fitted efficiency came from
#: (roofline.py, MATMUL_EFFICIENCY_BY_ARCHITECTURE: Ampere from Bekman's A100 SXM MAMF
#: figure, Hopper from XLA's, MAMF's and vLLM's H100 rows, Blackwell from B200's and
#: GB200's, CDNA 3 from MI300X's, CDNA 4 from MI355X's).
MATMUL_FITTED_ON: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "ampere": ("a100-80gb",), "hopper": ("h100-sxm",), "blackwell": ("b200", "gb200"),
    "cdna3": ("mi300x",), "cdna4": ("mi355x",)})
#: (flash kernel, generation) -> the GPU presets its attention figure was fitted on
#: (attention_rates.py): FlashAttention-2 on A100 and H100, FlashAttention-3 on H100,
#: cuDNN on H200 (Hopper) and GB200 / GB300 (Blackwell); Ampere's cuDNN figure is the one
#: the A100 end-to-end validations are calibrated with.  FlashAttention-2 on Blackwell is
#: Hopper's figure (the same pre-Hopper instructions), measured on H100.
ATTENTION_FITTED_ON: Mapping[tuple[str, str], tuple[str, ...]] = MappingProxyType({
    ("fa2", "ampere"): ("a100-80gb",), ("cudnn", "ampere"): ("a100-80gb",),
    ("fa2", "hopper"): ("h100-sxm",), ("fa3", "hopper"): ("h100-sxm",),
    ("cudnn", "hopper"): ("h200",), ("fa2", "blackwell"): ("h100-sxm",),
    ("cudnn", "blackwell"): ("gb200", "gb300")})
#: The GPU presets whose memory-bound rate is their own: those fitted per GPU
#: (roofline.py, MEMORY_EFFICIENCY_BY_GPU), and those behind the generic figure
#: (PyTorch's element-wise kernels in V100 and A100 traces, MEMORY_EFFICIENCY).
MEMORY_FITTED_ON: tuple[str, ...] = ("h100-sxm", "h200", "mi300x", "v100-16gb", "v100-32gb",
                                     "a100-40gb", "a100-80gb")


def _measured(gpu: GpuSpec, fitted_on: tuple[str, ...]) -> bool:
    """Whether ``gpu`` computes as one of the GPUs a fit used (module docstring)."""
    return any(same_compute(gpu, GPU_PRESETS[name]) for name in fitted_on)


def _whose(subject: str, value: float, of: str, gpu: GpuSpec,
           fitted_on: tuple[str, ...] | None, generic: str, knob: str) -> RunNote | None:
    """A note that ``subject`` (``"GEMMs on b300 run"``) at ``value`` of ``of`` (``"its
    peak"``) is a figure from other GPUs' tables (``fitted_on``) or, with none, the
    ``generic`` one; None when the GPU's own tables gave it."""
    if fitted_on and _measured(gpu, fitted_on):
        return None
    source = (f"a figure fitted on the kernel tables of {' and '.join(fitted_on)}, none of "
              f"{gpu.name}'s" if fitted_on else f"the generic figure: {generic}")
    return RunNote("defaulted", f"{subject} at {value:.3g} of {of}, {source}; set "
                   f"compute.{knob} for another", f"compute.{knob}")


def kernel_fit_notes(costs: RooflineCosts) -> tuple[RunNote, ...]:
    """The roofline's rates for ``costs.gpu`` that no kernel table of that GPU gave
    (module docstring), each a note; none for a figure the scenario set itself."""
    gpu, architecture = costs.gpu, costs.gpu.architecture or "this"
    notes = []
    if costs.matmul_asymptotic_efficiency is None:
        notes.append(_whose(
            f"GEMMs on {gpu.name} run", costs.resolved_matmul_efficiency, "their peak", gpu,
            MATMUL_FITTED_ON.get(gpu.architecture),
            f"no GEMM table of {architecture} GPUs was fitted", "matmul_efficiency"))
    kernel = costs.stack.flash_kernel
    if costs.attention_efficiency is None and costs.resolved_stack.attention == "flash":
        pair = (kernel, gpu.architecture)
        notes.append(_whose(
            f"fused attention ({kernel}) on {gpu.name} runs",
            costs.resolved_attention_efficiency, "its peak", gpu,
            ATTENTION_FITTED_ON.get(pair) if pair in ATTENTION_EFFICIENCY_BY_KERNEL else None,
            f"no {kernel} table of {architecture} GPUs was fitted", "attention_efficiency"))
    if costs.memory_efficiency is None and gpu.name not in MEMORY_FITTED_ON:
        notes.append(_whose(
            f"memory-bound kernels on {gpu.name} run", costs.resolved_memory_efficiency,
            "its HBM bandwidth", gpu, None,
            f"PyTorch's element-wise kernels on V100 and A100; no table of {gpu.name}'s "
            "was fitted", "memory_efficiency"))
    return tuple(note for note in notes if note is not None)
