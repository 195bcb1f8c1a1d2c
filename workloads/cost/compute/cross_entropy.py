"""The loss's cross entropy over a rank's vocabulary slice: how many kernels each
implementation launches and how many HBM bytes it moves per logit.

Every implementation reads the ``a``-byte logits (16-bit) the output layer wrote, and what
it does beyond that is the cost (``T·V/tp`` logits a micro-batch, so at a 128k vocabulary
it rivals a transformer layer's element-wise work).  Per logit, forward and backward:

* ``one_pass`` — a kernel that reads the logits once and writes its fp32 softmax (or the
  gradient in place): Transformer Engine's parallel cross entropy (Megatron-Core's
  ``cross_entropy_fusion_impl: te``, today's recipes: the ``megatron-core`` stack), Liger's,
  Inductor's (the ``torch-*`` stacks); ``a + 4`` bytes each way.
* ``megatron_fused`` — Megatron-Core's ``fused_vocab_parallel_cross_entropy``
  (``cross_entropy_loss_fusion``, on in NeMo 2's GPT configs before TE's kernel: the
  ``nemo`` stack): the logits cast to fp32 (``a + 4``), their max (4), TorchScript's
  subtract-and-exp (8), the sum (4) and the in-place division into the softmax it saves
  (8) — ``a + 28`` in 5 kernels; backward the softmax minus the one-hot times the loss
  gradient in one fused kernel (8) and the cast back (``4 + a``) — ``12 + a``.
* ``eager`` — Megatron's ``vocab_parallel_cross_entropy`` without the fusion (and the
  2021 Megatron-LM's: the ``megatron-lm-2021`` and ``megatron-deepspeed`` stacks): as
  above with the subtract (8) and the exp (8) apart — ``a + 36`` in 6 kernels; backward
  ``20 + a``: the 2021 count, which takes the one-hot's subtraction for a pass of its own
  (8) besides the scaling (8) and the cast back (``4 + a``).  Megatron-Core's unfused
  function measures 13.5 bytes (the one-hot is an indexed update of the target logits);
  the figure stays until the tables it moves (vTrain's, BLOOM's, on the 2021 stacks) are
  run again.

A backward is counted with its forward's kernels (a few microseconds of launches).

Liger's benchmark of Megatron's own two functions on H100 (``megatron_cross_entropy``,
8,192 tokens × 4k–128k vocabulary, bf16 logits) puts these within 5 % (fused) and 8 %
(unfused) of forward plus backward, uncalibrated; Liger's own one-pass kernel, called
through its Megatron wrapper, takes 1.7 times ``one_pass``'s bytes
(``validation/kernels/compare_cross_entropy.py``, docs/validation.md).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CROSS_ENTROPY", "CrossEntropy"]


@dataclass(frozen=True, slots=True)
class CrossEntropy:
    """One implementation: HBM bytes per logit beyond the ``a``-byte read of the logits
    (``forward_extra_bytes``), those of its backward with the cast back to ``a`` bytes
    (``backward_extra_bytes``), and the kernels it launches."""

    name: str
    forward_extra_bytes: float
    backward_extra_bytes: float
    launches: int

    def forward_bytes(self, activation_bytes: float) -> float:
        """HBM bytes per logit of the forward with ``activation_bytes``-wide logits."""
        return activation_bytes + self.forward_extra_bytes

    def backward_bytes(self, activation_bytes: float) -> float:
        """HBM bytes per logit of the backward, its gradient cast to the logits' width."""
        return activation_bytes + self.backward_extra_bytes


#: The implementations (module docstring), by the name ``compute.cross_entropy`` takes.
CROSS_ENTROPY: dict[str, CrossEntropy] = {
    "one_pass": CrossEntropy("one_pass", 4.0, 4.0, 1),
    "megatron_fused": CrossEntropy("megatron_fused", 28.0, 12.0, 5),
    "eager": CrossEntropy("eager", 36.0, 20.0, 6),
}
