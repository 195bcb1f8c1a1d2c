"""How context parallelism's attention communicates: ``parallelism.cp_comm_type``.

The values are the frameworks' own names (the physics of each is
:mod:`workloads.cost.context_parallel`'s):

* Megatron-Core's ``--cp-comm-type`` (Transformer Engine's ``cp_comm_type``):
  ``p2p`` (the ring, the default), ``all_gather``, ``a2a`` (DeepSpeed-Ulysses) and
  ``a2a+p2p`` (all-to-all inside groups of ``cp_a2a_size`` consecutive CP ranks — the first
  of Megatron's ``--hierarchical-context-parallel-sizes`` — and the ring across the groups);
* PyTorch's context parallel ``rotate_method`` (torchtitan's
  ``context_parallel_rotate_method``): ``allgather`` and ``alltoall``, here
  ``torch_allgather`` and ``torch_alltoall`` — PyTorch's ``allgather`` is not Transformer
  Engine's ``all_gather``, and a name one underscore apart would hide which is meant.

This module checks a strategy's choice; it holds no physics.
"""

from __future__ import annotations

from typing import Any

from distsim_gpu.simcore.errors import ConfigError, closest

__all__ = ["CP_COMM_TYPES", "TORCH_ROTATE_METHODS", "a2a_size", "check_cp_comm"]

#: Transformer Engine's types, then PyTorch's rotate methods.
CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p", "torch_allgather", "torch_alltoall")
TORCH_ROTATE_METHODS = ("torch_allgather", "torch_alltoall")


def a2a_size(comm_type: str, cp: int, cp_a2a_size: int) -> int:
    """The all-to-all group's size: ``cp`` under ``a2a``, ``cp_a2a_size`` under
    ``a2a+p2p``, 1 (no all-to-all) otherwise."""
    if comm_type == "a2a":
        return cp
    return cp_a2a_size if comm_type == "a2a+p2p" else 1


def check_cp_comm(parallel: Any, *, heads: int, kv_heads: int, windowed: bool = False,
                  source: str | None = None) -> None:
    """A ``parallel`` (:class:`~workloads.strategy.parallel.ParallelConfig`) whose context
    parallelism runs: no local attention (``windowed``) under cp > 1; a known type;
    ``cp_a2a_size`` set only with ``a2a+p2p`` and there a proper divisor of ``cp`` above
    1; under an all-to-all, attention heads per tensor rank — query and key/value —
    divisible by its group (Transformer Engine's ``AttnFuncWithCPAndQKVOA2A`` asserts
    ``num_heads % cp_size == 0`` for Q, K and V)."""
    comm_type, cp, cp_a2a_size, tp = (parallel.cp_comm_type, parallel.cp,
                                      parallel.cp_a2a_size, parallel.tp)
    if cp > 1 and windowed:
        raise ConfigError("context parallelism with local attention is not modelled",
                          key="parallelism.cp", source=source,
                          hint="cp 1, or leave model.attention_window out (a CP ring would "
                          "skip the blocks outside the window)")
    key = "parallelism.cp_comm_type"
    if comm_type in ("allgather", "alltoall"):  # PyTorch's spelling, ambiguous here
        raise ConfigError(f"cp_comm_type {comm_type!r} is ambiguous", key=key, source=source,
                          hint=f"torch_{comm_type} for PyTorch's context-parallel rotate "
                          "method (torchtitan's), all_gather or a2a for Transformer "
                          "Engine's (Megatron's --cp-comm-type)")
    if comm_type not in CP_COMM_TYPES:
        raise ConfigError(f"unknown context-parallel communication {comm_type!r}", key=key,
                          source=source, hint=closest(comm_type, CP_COMM_TYPES))
    if comm_type != "a2a+p2p" and cp_a2a_size != 1:
        raise ConfigError(f"cp_a2a_size {cp_a2a_size} needs cp_comm_type a2a+p2p "
                          f"(it is {comm_type})", key="parallelism.cp_a2a_size",
                          source=source, hint="leave cp_a2a_size out, or set cp_comm_type: "
                          "a2a+p2p")
    if comm_type == "a2a+p2p" and (cp_a2a_size in (1, cp) or cp % cp_a2a_size):
        raise ConfigError(f"a2a+p2p needs cp_a2a_size strictly between 1 and cp = {cp} "
                          f"and dividing it (it is {cp_a2a_size})",
                          key="parallelism.cp_a2a_size", source=source,
                          hint="Megatron's --hierarchical-context-parallel-sizes' first "
                          "size; cp_comm_type a2a for one all-to-all over all of cp")
    group = a2a_size(comm_type, cp, cp_a2a_size)
    kv_local = max(1, kv_heads // tp)  # replicated when fewer than tp
    if group > 1 and (heads // tp % group or kv_local % group):
        raise ConfigError(
            f"cp_comm_type {comm_type} splits attention heads over {group} ranks: the "
            f"{heads // tp} query and {kv_local} key/value heads per tensor rank "
            f"(heads {heads}, kv_heads {kv_heads}, tp {tp}) do not divide by {group}",
            key=key, source=source, hint="p2p or all_gather (they split the sequence), or "
            "a smaller all-to-all group (a2a+p2p with cp_a2a_size)")
