"""The loss's cross entropy over a rank's vocabulary slice: how many kernels each
implementation launches and how many HBM bytes it moves per logit.

Every implementation reads the ``a``-byte logits the output layer wrote, and what it does
beyond that is the cost (``T·V/tp`` logits a micro-batch, so at a 128k vocabulary it
rivals a transformer layer's element-wise work).  Most first copy 16-bit logits to fp32
(``a + 4`` bytes; nothing with fp32 logits), pass over the copy, and cast the gradient back
(``4 + a``).  Per logit, forward and backward, at 16 bits:

* ``one_pass`` — a kernel that reads the logits once and writes its fp32 softmax (or the
  gradient in place): Transformer Engine's parallel cross entropy (Megatron-Core's
  ``cross_entropy_fusion_impl: te``, today's recipes: the ``megatron-core`` stack), Liger's,
  Inductor's (``torch-compile``); ``a + 4`` bytes each way, no copy.
* ``megatron_fused`` — Megatron-Core's ``fused_vocab_parallel_cross_entropy``
  (``cross_entropy_loss_fusion``, on in NeMo 2's GPT configs before TE's kernel: the
  ``nemo`` and ``transformer-engine`` stacks): the copy, its max (4), TorchScript's
  subtract-and-exp (8), the sum (4) and the in-place division into the softmax it saves
  (8) — 30 in 5 kernels; backward the softmax minus the one-hot times the loss gradient in
  one fused kernel (8) and the cast back — 14.
* ``eager`` — Megatron's ``vocab_parallel_cross_entropy`` without the fusion (and the
  2021 Megatron-LM's: the ``megatron-lm-2021`` and ``megatron-deepspeed`` stacks): as
  above with the subtract (8) and the exp (8) apart — 38 in 6 kernels; backward as the
  fused one's, 14: the one-hot is an indexed update of the target logits, not a pass
  (distsim counted one until the measurement below said 13.5).
* ``torch`` — PyTorch's ``F.cross_entropy`` on the fp32 copy (torchtitan without
  ``torch.compile``: ``torch-eager``): ``log_softmax`` reads the row for its max, again for
  the sum of exponentials and a third time to write (16), ``nll_loss`` gathers the targets
  — 22 in 3 kernels; backward ``nll_loss``'s zero-filled gradient (4), ``log_softmax``'s
  sum and its read-read-write (16) and the cast back — 26.

A backward is counted with its forward's kernels (a few microseconds of launches).

Liger's benchmark of Megatron's own two functions on H100 (``megatron_cross_entropy``,
8,192 tokens × 4k–128k vocabulary, bf16 logits) puts ``megatron_fused`` and ``eager``
within 5 % and 8 % of forward plus backward, uncalibrated, and its B200 benchmark of
PyTorch's loss (fp32 logits, 1k–8k tokens × 128k) ``torch`` within 3 % (median of the
forward, the backward and both); Liger's own kernel takes 1.7–2 times ``one_pass``'s
bytes, which is a floor (``validation/kernels/compare_cross_entropy.py``,
docs/validation.md).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CROSS_ENTROPY", "CrossEntropy"]


@dataclass(frozen=True, slots=True)
class CrossEntropy:
    """One implementation: whether it copies 16-bit logits to fp32 first (and casts the
    gradient back), the HBM bytes per logit of its forward and backward passes beyond that
    (``forward_fp32_bytes``, ``backward_fp32_bytes``; without a copy, beyond the read of
    the logits), and the kernels it launches."""

    fp32_copy: bool
    forward_fp32_bytes: float
    backward_fp32_bytes: float
    launches: int

    def forward_bytes(self, activation_bytes: float) -> float:
        """HBM bytes per logit of the forward with ``activation_bytes``-wide logits."""
        if not self.fp32_copy:
            return activation_bytes + self.forward_fp32_bytes
        copy = activation_bytes + 4.0 if activation_bytes < 4 else 0.0
        return copy + self.forward_fp32_bytes

    def backward_bytes(self, activation_bytes: float) -> float:
        """HBM bytes per logit of the backward, its gradient in the logits' width."""
        if not self.fp32_copy:
            return activation_bytes + self.backward_fp32_bytes
        cast = 4.0 + activation_bytes if activation_bytes < 4 else 0.0
        return self.backward_fp32_bytes + cast


#: The implementations (module docstring), by the name ``compute.cross_entropy`` takes.
CROSS_ENTROPY: dict[str, CrossEntropy] = {
    "one_pass": CrossEntropy(False, 4.0, 4.0, 1),
    "megatron_fused": CrossEntropy(True, 24.0, 8.0, 5),
    "eager": CrossEntropy(True, 32.0, 8.0, 6),
    "torch": CrossEntropy(True, 16.0, 20.0, 3),
}
