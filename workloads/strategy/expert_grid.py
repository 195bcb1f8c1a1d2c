"""Which GPUs form each expert group: Megatron-Core's two rank grids, as closed forms.

Megatron-Core (``parallel_state.initialize_model_parallel``) lays a job's ranks out twice
over the same GPUs.  The **dense grid** (attention, dense MLPs, embeddings) has axes
``tp, cp, dp, pp``; the **expert grid** (the routed experts of MoE layers) has axes
``etp, ep, edp, pp``: expert-tensor parallelism (``parallelism.expert_tp``, Megatron's
``expert_tensor_parallel_size``, the dense ``tp`` when unset), expert parallelism, and the
expert data parallelism that is left, ``edp = tp·cp·dp / (etp·ep)``.  Both grids are
mixed-radix numberings in one axis order, innermost first: the placement ``order``
(:func:`workloads.strategy.parallel.placement_axes`, ``cp`` after ``tp`` unless named)
with ``ep`` just outside ``cp`` — Megatron's ``tp-cp-ep-dp-pp`` (its default) and
``tp-cp-ep-pp-dp`` (its ``tp-pp-dp`` mapping).  In the dense grid
``ep`` has size 1; in the expert grid ``tp`` has size ``etp``, ``cp`` size 1 and ``dp``
size ``edp``.  So expert parallelism is folded over ``dp·cp`` (and over ``tp`` where
``etp < tp``): with the default order an expert group of stage ``p`` is

    { p·S + e + etp·(k + ep·d) : k = 0 … ep−1 }   (S = tp·cp·dp, e < etp, d < edp).

A group of axes (``ep``; ``tp`` of the expert grid = the expert-tensor group; ``dp`` = the
expert data-parallel group) is the set of ranks that differ only in those axes, listed
with the innermost axis fastest, as Megatron's ``RankGenerator.get_ranks`` lists them.

Megatron-Core accepts a layout when the expert side divides each stage
(``tp·cp·dp`` divisible by ``etp·ep``), when the two grids give the same pipeline groups,
and — for an order not ending in ``pp`` — when ``edp = dp``; :func:`check_expert_grid`
refuses the rest with what would be valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from distsim_gpu.simcore.errors import ConfigError

__all__ = ["BlockLanes", "ExpertGrid", "check_expert_grid", "expert_axes", "expert_block",
           "grid_groups", "replica_of"]


def expert_axes(axes: tuple[str, ...]) -> tuple[str, ...]:
    """The five axes of both grids, innermost first: the placement's four (``tp``,
    ``cp``, ``dp``, ``pp`` in the job's order) with ``ep`` just outside ``cp``, where
    both of Megatron-Core's orders have it."""
    out = list(axes)
    out.insert(out.index("cp") + 1, "ep")
    return tuple(out)


def grid_groups(sizes: dict[str, int], axes: tuple[str, ...],
                dims: tuple[str, ...]) -> list[tuple[int, ...]]:
    """Every group of ranks that differ only in ``dims`` on the grid of axis ``sizes``
    numbered in ``axes`` order (innermost first): groups ordered by the other axes'
    index, members by ``dims``' own index, innermost fastest."""
    return list(_grid_groups(tuple(sizes[a] for a in axes), axes, dims))


@lru_cache(maxsize=64)  # a search asks for the same few grids once per candidate
def _grid_groups(shape: tuple[int, ...], axes: tuple[str, ...],
                 dims: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    sizes = dict(zip(axes, shape, strict=True))
    strides, stride = {}, 1
    for axis in axes:
        strides[axis] = stride
        stride *= sizes[axis]
    inside = [a for a in axes if a in dims]
    outside = [a for a in axes if a not in dims]
    return tuple(tuple(base + _offset(m, inside, sizes, strides)
                       for m in range(math.prod(sizes[a] for a in inside)))
                 for base in (_offset(g, outside, sizes, strides)
                              for g in range(math.prod(sizes[a] for a in outside))))


def _offset(index: int, axes: list[str], sizes: dict[str, int],
            strides: dict[str, int]) -> int:
    """The rank offset of the ``index``-th point of the sub-grid ``axes`` (innermost
    first)."""
    offset = 0
    for axis in axes:
        index, digit = divmod(index, sizes[axis])
        offset += digit * strides[axis]
    return offset


@dataclass(frozen=True, slots=True)
class ExpertGrid:
    """A job's dense and expert rank grids (see the module docstring).  ``axes``: the
    placement's axis order, innermost first (``tp``, ``cp``, ``dp``, ``pp`` in some
    order)."""

    tp: int
    etp: int
    cp: int
    ep: int
    dp: int
    pp: int
    axes: tuple[str, ...] = ("tp", "cp", "dp", "pp")

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def edp(self) -> int:
        """Expert data parallelism: the ranks holding the same expert shard, per stage."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    def dense_groups(self, *dims: str) -> list[tuple[int, ...]]:
        """The dense grid's groups over ``dims`` (``"tp"``, ``"cp"``, ``"dp"``, ``"pp"``)."""
        sizes = {"tp": self.tp, "cp": self.cp, "ep": 1, "dp": self.dp, "pp": self.pp}
        return grid_groups(sizes, expert_axes(self.axes), dims)

    def expert_groups(self, *dims: str) -> list[tuple[int, ...]]:
        """The expert grid's groups over ``dims``: ``"ep"``, ``"tp"`` (expert-tensor),
        ``"dp"`` (expert data-parallel), ``"pp"``."""
        sizes = {"tp": self.etp, "cp": 1, "ep": self.ep, "dp": self.edp, "pp": self.pp}
        return grid_groups(sizes, expert_axes(self.axes), dims)


def check_expert_grid(grid: ExpertGrid, *, source: str | None = None) -> None:
    """A :class:`ConfigError` for a layout Megatron-Core refuses (module docstring)."""
    stage = grid.tp * grid.cp * grid.dp
    if grid.etp < 1 or stage % (grid.etp * grid.ep):
        # Blame ep where it alone does not divide the stage, else the expert tp with it.
        culprit = "ep" if grid.etp < 1 or stage % grid.ep else "expert_tp"
        raise ConfigError(
            f"expert_tp·ep = {grid.etp}·{grid.ep} = {grid.etp * grid.ep} does not divide "
            f"the {stage} GPUs of a pipeline stage (tp·cp·dp = {grid.tp}·{grid.cp}·"
            f"{grid.dp})", key=f"parallelism.{culprit}", source=source,
            hint="the expert grid (expert_tp × ep × expert data parallelism) covers each "
            "stage's GPUs: choose expert_tp·ep dividing tp·cp·dp")
    if grid.axes[-1] != "pp" and grid.pp > 1 and grid.edp != grid.dp:
        raise ConfigError(
            f"with pipeline parallelism not outermost (order {'-'.join(grid.axes)}) the "
            f"expert data parallelism {grid.edp} must equal dp = {grid.dp}",
            key="parallelism.order", source=source,
            hint="put pp last in the order, or choose expert_tp·ep = tp·cp")
    if grid.dense_groups("pp") != grid.expert_groups("pp"):
        raise ConfigError(
            f"the dense and the expert grid give different pipeline groups in order "
            f"{'-'.join(grid.axes)}", key="parallelism.order", source=source,
            hint="put pp last in the order (Megatron-Core's default tp-cp-ep-dp-pp)")


#: A block's lanes: each one communicator, as (replica offset in the block, tensor rank)
#: pairs in member order.
BlockLanes = tuple[tuple[tuple[int, int], ...], ...]


def replica_of(grid: ExpertGrid, rank: int) -> tuple[int, int, int]:
    """``(stage, replica, tensor rank)`` of a global rank on the dense grid; a replica is
    a (cp, dp) pair, CP innermost (:mod:`workloads.strategy.parallel`)."""
    sizes = {"tp": grid.tp, "cp": grid.cp, "dp": grid.dp, "pp": grid.pp}
    coords: dict[str, int] = {}
    for axis in grid.axes:
        rank, coords[axis] = divmod(rank, sizes[axis])
    return coords["pp"], coords["cp"] + grid.cp * coords["dp"], coords["tp"]


@lru_cache(maxsize=64)
def expert_block(grid: ExpertGrid) -> tuple[int, BlockLanes]:
    """The smallest block of consecutive replicas that holds whole expert groups, and
    the expert groups of the first block as lanes (the other blocks' are the same,
    shifted by whole blocks).  With ``expert_tp = tp`` a block is ``ep`` replicas and a
    lane each tensor rank's; with ``expert_tp = 1`` an expert group is ``ep``
    consecutive GPUs, ``ep/tp`` replicas whole."""
    replicas = grid.cp * grid.dp
    groups = [[replica_of(grid, r) for r in group] for group in grid.expert_groups("ep")]
    stage0 = [g for g in groups if g[0][0] == 0]
    for block in (b for b in range(1, replicas + 1) if replicas % b == 0):
        if all(len({r // block for _s, r, _t in g}) == 1 for g in stage0):
            break
    lanes = [tuple((r % block, t) for _s, r, t in g) for g in stage0 if g[0][1] < block]
    shifted = sorted(tuple((r % block, t) for _s, r, t in g) for g in stage0)
    if shifted != sorted(lanes * (replicas // block)):
        return replicas, tuple(tuple((r, t) for _s, r, t in g) for g in stage0)
    return block, tuple(lanes)
