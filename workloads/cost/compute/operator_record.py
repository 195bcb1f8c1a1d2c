"""One operator of a transformer layer: the record the cost model times — a GEMM, a
batched activation GEMM, fused attention or a memory-bound element-wise op, with its FLOP,
bytes moved, shape and kernel launches — and the two constructors every layout builds
its operators with.  Which operators a layer runs, and in what order, is
:mod:`~distsim_gpu.workloads.cost.compute.operators`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.workloads.strategy.precision import LOW_PRECISIONS

__all__ = ["Kernel", "Operator", "bytes_per_element", "elementwise", "gemm"]

_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}


def bytes_per_element(precision: str) -> tuple[float, int]:
    """``(GEMM operand bytes, activation bytes)`` for a precision.

    fp8 and fp4 GEMMs read 1- and half-byte operands but keep activations and outputs in
    16 bits (Transformer Engine's recipes); other precisions use one size for both.
    """
    check_choice(precision, _BYTES, key="precision")
    operand = _BYTES[precision]
    return operand, 2 if precision in LOW_PRECISIONS else operand


@dataclass(frozen=True, slots=True)
class Operator:
    """One operator of a layer: FLOP and bytes moved per instance, ``count`` instances,
    ``launches`` GPU kernels per instance.

    ``kind``: ``gemm`` (a weight GEMM ``m×k · k×n``), ``bmm`` (a batched GEMM of two
    activations, shape of the whole batch), ``attention`` (fused flash-style) or
    ``elementwise`` (memory-bound).  ``fp8``: a GEMM reading FP8 operands.
    ``bwd_bytes_factor``: an element-wise op's backward bytes over its forward bytes.
    ``bias``: a weight GEMM whose layer adds a bias (its gradient is a reduction over the
    tokens, in the GEMM's epilogue or a kernel of its own as the stack does).
    ``fp8_input_fused``: an FP8 GEMM whose input its producer wrote in FP8 (no cast
    kernel; the backward transposes it).  ``efficiency_factor``: the fraction of the
    GEMM efficiency model's rate this kernel reaches (MXFP8 weight gradients).
    ``fp8`` means the GEMM reads the run's low-precision operands (FP8 or FP4).
    ``cast``: a low-precision cast kernel (at the recipe's rate, where it has one).
    ``output_bytes``: what a GEMM instance writes of its output (and reads, when it
    accumulates).  ``grouped``: the ``count`` instances are the groups of one grouped
    GEMM kernel (Megatron-Core's TEGroupedMLP, torchtitan's grouped_mm, DeepGEMM): one
    launch whose tiles, every group's, share the waves.  ``input_readers``: the operators
    that read a GEMM's input, itself included — separate linears over one tensor, or a
    later operator besides it; the backward adds their input gradients
    (``<gemm>.grad_sum``, one add for each reader after the first).
    """

    name: str
    kind: str
    flops: float
    bytes_moved: float
    m: int = 0
    n: int = 0
    k: int = 0
    count: int = 1
    launches: int = 1
    fp8: bool = False
    bwd_bytes_factor: float = 2.0
    bias: bool = False
    fp8_input_fused: bool = False
    efficiency_factor: float = 1.0
    cast: bool = False
    output_bytes: float = 0.0
    grouped: bool = False
    input_readers: int = 1

    @property
    def total_flops(self) -> float:
        """FLOP of all instances."""
        return self.flops * self.count

    @property
    def total_bytes(self) -> float:
        """Bytes moved by all instances."""
        return self.bytes_moved * self.count

    @property
    def base_name(self) -> str:
        """The forward operator this one derives from (``qkv`` for ``qkv.dgrad``)."""
        return self.name.split(".", 1)[0]


Kernel = Operator  # the name the cost model used before operators had launches


def gemm(name: str, mnk: tuple[int, int, int], operand_bytes: int, out_bytes: float,
         count: int = 1, *, kind: str = "gemm", fp8: bool = False,
         bias: bool = False) -> Operator:
    """A GEMM of shape ``mnk = (m, n, k)``: reads ``m×k`` and ``k×n`` operands and
    writes ``m×n`` outputs."""
    m, n, k = mnk
    moved = (m * k + k * n) * operand_bytes + m * n * out_bytes
    return Operator(name, kind, 2.0 * m * n * k, float(moved), m, n, k, count, fp8=fp8,
                    bias=bias, output_bytes=m * n * out_bytes)


def elementwise(name: str, bytes_moved: float, count: int = 1, *, flops: float = 0.0,
                launches: int = 1, bwd_bytes_factor: float = 2.0,
                cast: bool = False) -> Operator:
    """A memory-bound operator moving ``bytes_moved`` bytes (``cast``: a low-precision
    cast kernel)."""
    return Operator(name, "elementwise", float(flops), float(bytes_moved), count=count,
                    launches=launches, bwd_bytes_factor=bwd_bytes_factor, cast=cast)
