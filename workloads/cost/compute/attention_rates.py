"""Fused (flash) attention kernels' rates: the fraction of the 16-bit peak each kernel
(FlashAttention-2, FlashAttention-3, cuDNN's) reaches on each GPU generation at a reference
shape, and how that fraction moves with the sequence and the head width (the kernel
tables' fitted curves).  The roofline (:mod:`~distsim_gpu.workloads.cost.compute.roofline`)
times an ``attention`` operator at the peak times these.
"""

from __future__ import annotations

__all__ = [
    "ATTENTION_EFFICIENCY",
    "ATTENTION_EFFICIENCY_BY_KERNEL",
    "ATTENTION_REFERENCE_SHAPE",
    "ATTENTION_SATURATION",
    "attention_efficiency",
    "attention_shape_factor",
]

# Fraction of the dense 16-bit peak a fused (flash) attention kernel reaches over its forward
# and backward, by kernel and GPU architecture.  FlashAttention-2 reaches 50-73 % of A100
# peak forward and less backward (Dao 2023, "FlashAttention-2", abstract and §4.1: ~0.5 over
# both).  Hopper: fitted by validation/kernels/fit_kernels.py as
# ``e_inf · s/(s + s_half) · d/(d + d_half)`` (ATTENTION_SATURATION) and taken at s = 4096,
# d = 128 — fa2 on the FlashAttention-2 repository's H100 fwd+bwd figure (hand-transcribed,
# 24 bars, CV median error 7.3 %, 19.4 % at the earlier 0.35): 0.319; cudnn on cuDNN
# frontend's H200 SDPA benchmark (BF16 fwd+bwd, 13 rows, CV 10.7 %, 19.8 % at 0.5): 0.512;
# fa3 on the FlashAttention-3 figure (H100 forward only, 35 bars, CV 10.2 %): 0.590, a
# forward figure (no FA3 backward table is public).  Ampere keeps 0.5: the A100 FA2 figure
# fits 0.579 (CV 6.1 %, 14.7 % at 0.5), but the A100 end-to-end validations are calibrated
# with 0.5.  Blackwell: cudnn on cuDNN frontend's GB200 and GB300 SDPA benchmark (BF16 fwd
# and bwd, 90 rows, CV 8.8 %): 0.634; FA2 runs the same pre-Hopper instructions, taken as on
# Hopper.  Any other pair: ATTENTION_EFFICIENCY.
ATTENTION_EFFICIENCY = 0.5
ATTENTION_EFFICIENCY_BY_KERNEL: dict[tuple[str, str], float] = {
    ("fa2", "ampere"): 0.5, ("fa2", "hopper"): 0.319, ("fa2", "blackwell"): 0.319,
    ("fa3", "hopper"): 0.590,
    ("cudnn", "ampere"): 0.5, ("cudnn", "hopper"): 0.512, ("cudnn", "blackwell"): 0.634,
}
# The fitted curves behind those figures: (kernel, architecture) -> (e_inf, s_half, d_half)
# (validation/kernels/fit_kernels.py, same data as above).  Efficiency falls at short
# sequences and small heads: an attention operator of sequence s and query-key head width
# d runs at the figure above times the curve's s/(s + s_half) · d/(d + d_half) over its
# value at ATTENTION_REFERENCE_SHAPE (attention_shape_factor), so the figures, A100's
# included, hold at the reference shape and the curve says how the rate moves from it.
ATTENTION_SATURATION: dict[tuple[str, str], tuple[float, float, float]] = {
    ("fa2", "ampere"): (0.712, 384.0, 16.0), ("fa2", "hopper"): (0.415, 384.0, 24.0),
    ("fa3", "hopper"): (0.913, 512.0, 48.0), ("cudnn", "hopper"): (0.640, 1024.0, 0.0),
    ("cudnn", "blackwell"): (0.800, 768.0, 8.0),
}
# (sequence length, query-key head width) at which ATTENTION_EFFICIENCY_BY_KERNEL holds.
ATTENTION_REFERENCE_SHAPE = (4096, 128)


def attention_efficiency(flash_kernel: str, architecture: str) -> float:
    """Fraction of peak the fused attention kernel ``flash_kernel`` (``fa2``, ``fa3``, ``cudnn``)
    reaches on a GPU of ``architecture`` (:data:`ATTENTION_EFFICIENCY_BY_KERNEL`;
    :data:`ATTENTION_EFFICIENCY` for a pair without a published figure)."""
    return ATTENTION_EFFICIENCY_BY_KERNEL.get((flash_kernel, architecture),
                                              ATTENTION_EFFICIENCY)


def attention_shape_factor(flash_kernel: str, architecture: str, seq_len: int,
                           head_dim: int) -> float:
    """How much faster (above 1) or slower the fused attention kernel runs over a sequence
    of ``seq_len`` with query-key heads ``head_dim`` wide than at
    :data:`ATTENTION_REFERENCE_SHAPE`: the ratio of its fitted curve
    (:data:`ATTENTION_SATURATION`) at the two shapes; 1 for a kernel and architecture
    without a curve, or a shape not known (0)."""
    curve = ATTENTION_SATURATION.get((flash_kernel, architecture))
    if curve is None or seq_len <= 0 or head_dim <= 0:
        return 1.0
    _, s_half, d_half = curve
    reference_s, reference_d = ATTENTION_REFERENCE_SHAPE
    return (seq_len / (seq_len + s_half) * head_dim / (head_dim + d_half)) / (
        reference_s / (reference_s + s_half) * reference_d / (reference_d + d_half))
