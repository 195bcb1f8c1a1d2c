"""A measured table checked against itself: rows no physical model can match together.

Runs that differ only in their micro-batch do the same work on every GPU: the global batch,
the model and the strategy are the same, the work is cut into more or fewer pieces.  A
pipeline of ``p`` stages runs ``m = global_batch / (dp · micro_batch)`` micro-batches in
``m + p − 1`` slots (GPipe and 1F1B), each slot one micro-batch's forward and backward on
a stage, so an iteration is ``T = (m + p − 1) · micro_batch · c + F``: ``c`` the time per
sample of a slot, ``F`` what does not scale with it (the gradient all-reduce, the
optimizer step).  Larger pieces make GEMMs larger, kernels and launches fewer, bubbles
longer — all of which the ``(m + p − 1)`` factor and a non-increasing ``c`` express — and
only one thing known to a cost model makes ``c`` grow with the micro-batch: the memory
filling up.  That is the **premise**: per-sample slot time rises by no more than
:data:`TOLERANCE` as the micro-batch grows.  Every predicted time ``P`` of a model that
keeps it has ``q = P / ((m + p − 1) · micro_batch)`` non-increasing within the tolerance
(``F ≥ 0`` only makes ``q`` fall faster).

For two rows ``i``, ``j`` of a group with ``micro_batch_i ≤ micro_batch_j`` and measured
per-sample slot times ``v_i``, ``v_j``, no such model can be within ``ε`` of both unless
``v_j (1 − ε) ≤ (1 + tolerance) · v_i (1 + ε)``, that is
``ε ≥ (v_j − (1 + tolerance) v_i) / (v_j + (1 + tolerance) v_i)``; the largest of these
over a group's pairs is the group's bound, and it is attainable (the constraints are
pairwise, so the pairwise conditions are also sufficient).  A group whose bound is above
zero holds measurements that contradict the premise: memory pressure, or the cluster
(a slow node, another job) differing between the runs.  Rows whose strategy cannot be
read as numbers, or that run an interleaved schedule (another bubble), are not checked.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distsim_gpu.scenarios.fit.runs_table import RunRow
from distsim_gpu.simcore.config import set_path
from distsim_gpu.simcore.errors import DistsimError

__all__ = ["TOLERANCE", "MicroBatchRise", "micro_batch_rises", "pair_bound"]

# How much per-sample slot time may rise with the micro-batch before rows count as
# contradicting each other: distsim's own costs never let it rise on vTrain's 1,549 runs
# (tiles, waves, launches and host all favour larger pieces); 10 % leaves room for effects
# a cost model may not have, such as a GEMM shape that cuBLAS serves with a slower kernel.
TOLERANCE = 0.10


@dataclass(frozen=True, slots=True)
class MicroBatchRise:
    """Two measured rows of one configuration that no premise-keeping model can both
    match within ``bound_pct`` %: ``low_line`` at micro-batch ``low_micro_batch`` and
    ``high_line`` at ``high_micro_batch`` (no smaller), whose per-sample slot time is
    ``rise`` times the first's.  ``group_lines``: every row of that configuration."""

    low_line: int
    high_line: int
    low_micro_batch: int
    high_micro_batch: int
    rise: float
    bound_pct: float
    group_lines: tuple[int, ...]


def pair_bound(slot_s_low: float, slot_s_high: float, tolerance: float = TOLERANCE) -> float:
    """The least max |relative error| over the two rows of any premise-keeping model, for
    per-sample slot times ``slot_s_low`` (smaller micro-batch) and ``slot_s_high``."""
    allowed = (1.0 + tolerance) * slot_s_low
    return max(0.0, (slot_s_high - allowed) / (slot_s_high + allowed))


def micro_batch_rises(rows: Sequence[RunRow], base: Mapping[str, Any],
                      tolerance: float = TOLERANCE) -> tuple[MicroBatchRise, ...]:
    """For every group of rows that differ only in their micro-batch, the pair of rows
    that bounds it, where the bound is above zero; worst first."""
    groups: dict[Any, list[tuple[int, float, RunRow]]] = {}
    for row in rows:
        spec = _row_spec(row, base)
        shape = None if spec is None else _slot_shape(spec)
        if shape is None:
            continue
        micro_batch, slots = shape
        # The configuration is everything the row runs but its micro-batch, however the
        # row spelled it (a dotted key, a whole section, the base's value).
        del spec["training"]["micro_batch"]
        groups.setdefault(_canonical(spec), []).append(
            (micro_batch, row.measured_s / slots, row))
    found = [rise for members in groups.values()
             if (rise := _worst_pair(sorted(members, key=lambda m: (m[0], m[2].line)),
                                     tolerance)) is not None]
    return tuple(sorted(found, key=lambda r: (-r.bound_pct, r.low_line)))


def _worst_pair(members: Sequence[tuple[int, float, RunRow]],
                tolerance: float) -> MicroBatchRise | None:
    best: MicroBatchRise | None = None
    lines = tuple(m[2].line for m in members)
    # Every ordered pair with the first's micro-batch no larger: two runs of one
    # micro-batch (a repeated measurement) bound each other both ways.
    for mb_i, slot_i, row_i in members:
        for mb_j, slot_j, row_j in members:
            if row_j is row_i or mb_j < mb_i:
                continue
            bound = pair_bound(slot_i, slot_j, tolerance) * 100.0
            if bound > 0 and (best is None or bound > best.bound_pct):
                best = MicroBatchRise(row_i.line, row_j.line, mb_i, mb_j, slot_j / slot_i,
                                      bound, lines)
    return best


def _canonical(value: Any) -> Any:
    """A hashable form of a YAML value in which equal mappings are equal whatever their
    key order (keys compared as text: a mapping may mix numbers and strings)."""
    if isinstance(value, Mapping):
        return tuple(sorted((repr(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v) for v in value)
    return repr(value)


def _row_spec(row: RunRow, base: Mapping[str, Any]) -> dict[str, Any] | None:
    """The scenario mapping a row runs (the base with its keys set), None if unreadable."""
    spec: dict[str, Any] = copy.deepcopy(dict(base))
    try:
        for key, value in row.overrides:
            set_path(spec, key, copy.deepcopy(value))
    except DistsimError:
        return None
    return spec


def _slot_shape(spec: Mapping[str, Any]) -> tuple[int, float] | None:
    """``(micro_batch, (m + p − 1) · micro_batch)`` of a scenario mapping, or None where
    it does not state them as numbers or runs an interleaved schedule."""
    training, parallel = spec.get("training"), spec.get("parallelism")
    if not isinstance(training, Mapping) or not isinstance(parallel, Mapping):
        return None
    numbers = (training.get("micro_batch"), training.get("global_batch"),
               parallel.get("dp"), parallel.get("pp", 1))
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in numbers):
        return None
    if str(parallel.get("schedule", "1f1b")).lower() not in ("1f1b", "gpipe"):
        return None
    micro_batch, global_batch, dp, pp = numbers
    microbatches = global_batch / (dp * micro_batch)
    if microbatches < 1:  # (a row the scenario check refuses: no slot to compare)
        return None
    return micro_batch, (microbatches + pp - 1) * micro_batch
