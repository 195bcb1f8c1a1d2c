"""The kernels a two-hop expert-parallel exchange runs on: what their copies reach.

``all_to_all: deepep`` (:mod:`collectives.deepep`) is the exchange DeepEP's normal kernels
made and NVIDIA's HybridEP (DeepEP's ``hybrid-ep`` branch, Megatron-Core's ``hybridep``
flex-dispatcher backend) runs too: a token once per destination GPU over NVLink, once per
destination node over InfiniBand to the GPU on the sender's rail, which forwards it.  The
two families move their tokens differently, and ``communication.ep_kernels`` names which
one a run uses; each entry of :data:`EP_KERNELS` gives that family's figures, the defaults
of the three keys that override them one by one:

* ``nvlink_efficiency`` (``communication.deepep_nvlink_efficiency``): the fraction of the
  payload rate NCCL's bulk copies reach on the same NVLink that the kernels' copies reach;
* ``sm_token_s`` and ``sm_bytes_per_s`` (``deepep_sm_token_time``, ``deepep_sm_rate``):
  what one of the SMs the kernels hold (``compute.comm_sms``) spends on each token and how
  fast it streams its bytes, which bound the NVLink copies when few SMs run them
  (:func:`collectives.deepep.sm_bound_factor`); a byte rate of 0 leaves them unbound.

DeepEP's warps copy token by token into per-rank ring buffers; HybridEP's copies run on
the Tensor Memory Accelerator, so its SMs issue them rather than stream them, and its
published rows reach NVLink's rate on 16 SMs where DeepEP's reach half of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim_gpu.simcore.notes import RunNote

__all__ = [
    "DEEPEP_FIT_ARCHITECTURE",
    "DEEPEP_NVLINK_EFFICIENCY",
    "DEEPEP_SM_BYTES_PER_S",
    "DEEPEP_SM_TOKEN_S",
    "EP_KERNELS",
    "HYBRIDEP_NVLINK_EFFICIENCY",
    "EpKernels",
]

# DeepEP's normal kernels' NVLink copies as a fraction of the payload rate NCCL reaches on
# the same links: the median of measured / distsim-at-1.0 over DeepEP's intranode (EP 8)
# H800 rows, its own microbenchmark on one node (validation/deepep/compare_deepep.py
# --fit; tests/collectives/test_deepep.py holds it to the data).  Their warps copy token by
# token into per-rank ring buffers and signal each chunk, which NCCL's bulk copies do not pay.
DEEPEP_NVLINK_EFFICIENCY = 0.84
#: The GPU generation that figure was measured on (H800); elsewhere a run says it assumed it.
DEEPEP_FIT_ARCHITECTURE = "hopper"
#: What one SM of DeepEP's normal kernels streams of its NVLink copies, and the time it
#: spends on each token besides (its routing metadata, scales and signals): a token of
#: ``B`` bytes takes an SM ``DEEPEP_SM_TOKEN_S + B / DEEPEP_SM_BYTES_PER_S``.  Fitted on
#: B200's SM sweep (the ``hybrid-ep`` branch README's DeepEP rows, dispatch on 8 GPUs, 16
#: to 48 SMs): its BF16 rows give 18.5 GB/s an SM, its FP8 rows (half the bytes, and their
#: scales) 12.5, and these two constants both (validation/deepep/compare_sms.py --fit;
#: tests/collectives/test_deepep.py holds them to the data).  The only SM sweep of
#: DeepEP's normal kernels published; its combine, which also sums each token's top-k
#: copies, moves fewer bytes an SM still (docs/validation.md).
DEEPEP_SM_BYTES_PER_S = 38e9
DEEPEP_SM_TOKEN_S = 0.4e-6
# HybridEP's NVLink copies, the same way: the median of measured / distsim-at-1.0 over its
# 8-rank kernel-time rows on B200 and GB200 (16 and 32 SMs, dispatch and combine, BF16 and
# FP8; validation/deepep/compare_rack_a2a.py --fit), so that 16 to 36 ranks are predictions.
HYBRIDEP_NVLINK_EFFICIENCY = 0.90


@dataclass(frozen=True, slots=True)
class EpKernels:
    """One family of expert-parallel dispatch and combine kernels (module docstring):
    ``label`` its name in a run's notes; ``sm_bytes_per_s`` 0: copies not bound by the
    SMs; ``fit_architecture`` the GPU generation whose rows (``fit_rows``) gave its NVLink
    fraction; ``caveat`` what every run on these kernels says it left out or assumed."""

    name: str
    label: str
    nvlink_efficiency: float
    sm_token_s: float
    sm_bytes_per_s: float
    fit_architecture: str
    fit_rows: str
    source: str
    caveat: RunNote


EP_KERNELS: dict[str, EpKernels] = {
    "deepep": EpKernels(
        "deepep", "DeepEP", DEEPEP_NVLINK_EFFICIENCY, DEEPEP_SM_TOKEN_S, DEEPEP_SM_BYTES_PER_S,
        DEEPEP_FIT_ARCHITECTURE, "DeepEP's own H800 table",
        "DeepEP's normal kernels (deepseek-ai/DeepEP): NVLink fraction from its H800 "
        "intranode rows, SM costs from B200's SM sweep",
        RunNote("unmodelled", "DeepEP's normal dispatch makes the host wait for the count "
                "of tokens each GPU received before it can issue the experts' kernels (a "
                "CPU-GPU synchronisation every MoE layer's forward); the GPU's wait for the "
                "host after it is not counted", "communication.all_to_all")),
    "hybridep": EpKernels(
        "hybridep", "HybridEP", HYBRIDEP_NVLINK_EFFICIENCY, 0.0, 0.0, "blackwell",
        "HybridEP's own B200 and GB200 rows",
        "NVIDIA's HybridEP (DeepEP's hybrid-ep branch): TMA copies, NVLink fraction from "
        "its 8-rank B200 and GB200 rows, not bound by the SMs it holds",
        RunNote("defaulted", "HybridEP's copies (the Tensor Memory Accelerator's) are "
                "taken as unbound by the SMs its kernels hold; its published rows run slower "
                "on 4-8 SMs, and its FP8 dispatch on 16 SMs past 16 ranks (up to 2.5x)",
                "communication.ep_kernels")),
}

