"""Parallelism dimensions: each way of splitting a job over GPUs, in one registry.

A :class:`Dimension` says everything the rest of the simulator needs to know about one
way of splitting (tensor, pipeline, data, expert, context parallelism): its key in a
scenario's ``parallelism:`` mapping and how its degree is read from a
:class:`~workloads.strategy.parallel.ParallelConfig`, the communicators its collectives run
in (:class:`PeerGroup`: who meets, the critical-path kind of the time spent there, the
tag the network counts its bytes under), the label of its time on the critical path,
whether a block of its ranks is the unit the iteration folds replicas by, how it prints
in a strategy summary, and how a strategy search ranges over it.

The iteration (:mod:`workloads.iteration`) looks these up by the name an op's ``group``
carries (:data:`workloads.iteration.ops.Peers`) instead of matching names itself, so a new
dimension is one :func:`register` call (or one entry below) plus the op builder that
emits its collectives.  The built-in entries are :data:`DIMENSIONS`, in summary order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from operator import attrgetter

from distsim_gpu.simcore.errors import ConfigError, SimulationError, closest
from distsim_gpu.workloads.strategy.expert_grid import BlockLanes, expert_block
from distsim_gpu.workloads.strategy.parallel import ParallelConfig
from distsim_gpu.workloads.strategy.sharding import replicate_sets, shard_sets

__all__ = [
    "DIMENSIONS",
    "Dimension",
    "FoldUnit",
    "PeerGroup",
    "Peering",
    "async_handle",
    "block_layout",
    "cp_lanes",
    "critical_kinds",
    "dimension",
    "dimensions",
    "folding_unit",
    "peer_degrees",
    "peer_group",
    "peer_groups",
    "register",
    "registered",
    "stage_sets",
    "strategy_summary",
]


class Peering(Enum):
    """Which rank groups (the ``tp`` GPUs of one stage of one replica) form one
    communicator of a :class:`PeerGroup`, relative to the group that calls it."""

    #: The rank group's own GPUs (tensor parallelism): nobody else meets.
    OWN = "own"
    #: The block of ``degree`` consecutive replicas of the caller's stage holding it
    #: (expert parallelism, a context-parallel ring).  Its traffic stays inside the block,
    #: so such a dimension must be a folding unit (:class:`FoldUnit`) — or, where the
    #: iteration folds inside its blocks (not a ring's), its calls run in full.
    BLOCK = "block"
    #: Every replica of the caller's stage (data parallelism): it spans folded units, so
    #: it runs in full over every replica's lanes.
    STAGE = "stage"
    #: The caller's stage ``s`` and its mirror ``pp − 1 − s`` of the caller's replica: the
    #: first and the last stage for the tied word embedding, DualPipe's two copies of a
    #: stage; waiting for the other end is the pipeline's flush (bubble, not idle).
    ENDS = "ends"


@dataclass(frozen=True, slots=True)
class PeerGroup:
    """One communicator a dimension's collectives run in.

    ``name`` is what an op's ``group`` says; ``comm_kind`` the critical-path (and trace)
    kind of the time spent in its calls; ``tag`` the flow tag the network counts their
    bytes under.  ``ring``: each call is every member's send to the next member of its
    block (one step of a ring, as context parallelism's attention runs), not a collective
    algorithm among them.  ``layout``: for a :attr:`Peering.BLOCK` group, its block size
    in replicas and the block's communicators (lanes) under a strategy; None: blocks of
    the dimension's degree, one lane per tensor rank (:func:`block_layout`).
    ``replica_sets``: for a :attr:`Peering.STAGE` group, the sets of replicas (indices
    within the stage) each of whose tensor lanes is one communicator; None: one set of
    every replica.  Every replica still meets every other for each call (they run in
    step), the sets' calls launched together.
    """

    name: str
    comm_kind: str
    peering: Peering
    tag: str
    ring: bool = False
    layout: Callable[[ParallelConfig], tuple[int, BlockLanes]] | None = None
    replica_sets: Callable[[ParallelConfig], tuple[tuple[int, ...], ...]] | None = None


@dataclass(frozen=True, slots=True)
class FoldUnit:
    """How a dimension's block of replicas is named when the iteration folds by it:
    ``"expert-parallel"`` (``adjective``) ``"block"`` (``noun``), which ``"expert
    parallelism"`` (``spans``) spans."""

    adjective: str
    noun: str
    spans: str


@dataclass(frozen=True, slots=True)
class Dimension:
    """One parallelism dimension (see the module docstring).

    ``name``: its key in ``parallelism:`` (and in ``space:`` of a search); ``degree``:
    how its degree is read from a :class:`ParallelConfig`; ``critical_kind``: the label of
    its time on the critical path; ``groups``: the communicators its collectives run in
    (none: it only sends point to point); ``fold_unit``: set where a block of its ranks is
    the unit the iteration folds replicas by (the first such dimension of degree > 1, in
    registry order, is); ``always_printed``: a summary names it at degree 1 too;
    ``searched``: a strategy search ranges over it (the built-in tp, pp, ep and cp; a new
    dimension also needs its loop in the search's enumeration, so the default is False);
    ``search_default``: the degrees a search tries
    when its ``space:`` does not say (None: every degree that fits the cluster).
    """

    name: str
    degree: Callable[[ParallelConfig], int]
    critical_kind: str
    groups: tuple[PeerGroup, ...] = ()
    fold_unit: FoldUnit | None = None
    always_printed: bool = True
    searched: bool = False
    search_default: tuple[int, ...] | None = None
    #: Where a summary names the dimension only when a strategy sets it: whether it does.
    set_in: Callable[[ParallelConfig], bool] | None = None

    def printed(self, degree: int) -> str | None:
        """How the dimension prints in a strategy summary (``"tp 4"``); None where the
        summary leaves it out (degree 1 of a dimension not ``always_printed``)."""
        if degree == 1 and not self.always_printed:
            return None
        return f"{self.name} {degree}"


#: The built-in dimensions, in summary order (which is also the critical-path order).
DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("tp", attrgetter("tp"), "tp comm",
              (PeerGroup("tp", "tp comm", Peering.OWN, "tp"),), searched=True),
    # The pipeline's own traffic is point-to-point sends; the tied word embedding's
    # gradients are all-reduced between its two ends, and DualPipe's two copies of a
    # stage's between their ranks, counted as gradient reduction.
    Dimension("pp", attrgetter("pp"), "pp transfer",
              (PeerGroup("embedding", "dp comm", Peering.ENDS, "dp"),
               PeerGroup("mirror", "dp comm", Peering.ENDS, "dp")), searched=True),
    # Not searched: its degree is what the others leave of the cluster.
    Dimension("dp", attrgetter("dp"), "dp comm",
              (PeerGroup("dp", "dp comm", Peering.STAGE, "dp"),)),
    # HSDP (workloads.strategy.sharding): ZeRO-3/FSDP's gathers and reductions within
    # each shard group, the reduced shards all-reduced across the groups.  A split of dp,
    # not a factor of the cluster; named only where set.
    Dimension("dp_replicate", attrgetter("dp_replicate"), "dp comm",
              (PeerGroup("dp_shard", "dp comm", Peering.STAGE, "dp", replica_sets=shard_sets),
               PeerGroup("dp_replicate", "dp comm", Peering.STAGE, "dp",
                         replica_sets=replicate_sets)),
              always_printed=False),
    # The expert groups are Megatron-Core's (workloads.strategy.expert_grid): over dp·cp,
    # and over tp too where expert_tp < tp.
    Dimension("ep", attrgetter("ep"), "ep comm",
              (PeerGroup("ep", "ep comm", Peering.BLOCK, "ep",
                         layout=lambda p: expert_block(p.expert_grid())),),
              FoldUnit("expert-parallel", "block", "expert parallelism"),
              always_printed=False, searched=True),
    # The experts' own tensor parallelism: its collectives run on the tensor-parallel
    # group or sub-groups of it (none with expert_tp 1), so it has no communicator of
    # its own.
    Dimension("expert_tp", attrgetter("etp"), "tp comm",
              set_in=lambda p: p.expert_tp is not None),
    # Context parallelism only when asked for: it pays off for long sequences only, and
    # multiplies a search's candidates.
    # Its ring (each rank's sends to the next; across the all-to-all groups under
    # cp_comm_type a2a+p2p) and its collectives (all-gathers, all-to-alls: over the
    # whole ring, or within the a2a+p2p groups), workloads.cost.context_parallel.
    Dimension("cp", attrgetter("cp"), "cp comm",
              (PeerGroup("cp", "cp comm", Peering.BLOCK, "cp", ring=True,
                         layout=lambda p: cp_lanes(p, ring=True)),
               PeerGroup("cp_collective", "cp comm", Peering.BLOCK, "cp",
                         layout=lambda p: cp_lanes(p, ring=False))),
              FoldUnit("context-parallel", "ring", "context parallelism"),
              always_printed=False, searched=True, search_default=(1,)),
)


def cp_lanes(parallel: ParallelConfig, *, ring: bool) -> tuple[int, BlockLanes]:
    """Context parallelism's block (its ``cp`` replicas) and communicators: per tensor
    rank, the ring over every CP rank and one collective group of them all (none where
    the type runs no collective: p2p, torch_alltoall) — except under
    a2a+p2p, whose all-to-alls run among ``cp_a2a_size = a`` consecutive CP ranks and
    whose rings join the same position of each such group (Transformer Engine's
    ``send_dst``: ``(rank + 1) % (cp/a) · a + rank_a2a``)."""
    cp, tp = parallel.cp, parallel.tp
    a = parallel.cp_a2a_size if parallel.cp_comm_type == "a2a+p2p" else 1
    if not ring and parallel.cp_comm_type in ("p2p", "torch_alltoall"):
        # No collective: a block of one, which neither bounds nor splits folding's units.
        return 1, tuple(((0, t),) for t in range(tp))
    if ring:
        return cp, tuple(tuple((g * a + j, t) for g in range(cp // a))
                         for j in range(a) for t in range(tp))
    a = a if a > 1 else cp
    return cp, tuple(tuple((g * a + j, t) for j in range(a))
                     for g in range(cp // a) for t in range(tp))


# The registry the lookups read: the built-ins, then what register() added.
_registry: dict[str, Dimension] = {d.name: d for d in DIMENSIONS}


def dimensions() -> tuple[Dimension, ...]:
    """Every registered dimension, in registry order."""
    return tuple(_registry.values())


def dimension(name: str) -> Dimension:
    """The dimension called ``name``; a :class:`ConfigError` naming the valid ones if none is."""
    try:
        return _registry[name]
    except KeyError:
        raise ConfigError(f"unknown parallelism dimension {name!r}",
                          hint=closest(name, _registry)) from None


def peer_groups() -> dict[str, PeerGroup]:
    """Every registered dimension's communicators, by the name an op's ``group`` says."""
    return {group.name: group for dim in _registry.values() for group in dim.groups}


def peer_group(name: str) -> PeerGroup:
    """The communicator an op's ``group`` names; an error if no dimension has it."""
    found = peer_groups().get(name)
    if found is None:
        raise SimulationError(f"no collective among {name!r} in an iteration: no "
                              f"registered dimension has such a group "
                              f"({', '.join(sorted(peer_groups()))})")
    return found


def peer_degrees(parallel: ParallelConfig) -> dict[str, int]:
    """Per communicator name, the degree of the dimension it belongs to in ``parallel``;
    a :attr:`Peering.BLOCK` group's block size in replicas."""
    return {group.name: (block_layout(group, parallel)[0] if group.peering is Peering.BLOCK
                         else dim.degree(parallel))
            for dim in _registry.values() for group in dim.groups}


def block_layout(group: PeerGroup, parallel: ParallelConfig) -> tuple[int, BlockLanes]:
    """A :attr:`Peering.BLOCK` group's block size in replicas and its communicators in a
    block, each as (replica offset, tensor rank) pairs: the group's ``layout``, else
    blocks of the dimension's degree with one lane per tensor rank."""
    size = next(d.degree(parallel) for d in _registry.values() if group in d.groups)
    if group.layout is not None and size > 1:  # (degree 1: nobody else meets)
        return group.layout(parallel)
    return size, tuple(tuple((r, t) for r in range(size)) for t in range(parallel.tp))


def stage_sets(group: PeerGroup, parallel: ParallelConfig) -> tuple[tuple[int, ...], ...]:
    """A :attr:`Peering.STAGE` group's sets of replicas, one communicator per tensor lane
    of each (every replica in one set unless its ``replica_sets`` says otherwise)."""
    if group.replica_sets is None:
        return (tuple(range(parallel.dp_cp)),)
    return group.replica_sets(parallel)


def critical_kinds() -> tuple[str, ...]:
    """The critical-path labels of the dimensions' time, in registry order."""
    return tuple(dict.fromkeys(dim.critical_kind for dim in _registry.values()))


def folding_unit(parallel: ParallelConfig,
                 inside: bool = False) -> tuple[Dimension | None, int]:
    """The dimension the iteration's folding unit is named after, and the unit in
    replicas (``(None, 1)``: single replicas): the first folding dimension of degree > 1
    names it; the unit holds a whole block of every one (the least common multiple of
    their blocks: expert parallelism over a context-parallel ring's replicas).
    ``inside``: folding inside expert blocks, whose collectives then run in full over
    every block's lanes (as a data-parallel one does) and so no longer bound the unit:
    only the blocks of ring communicators (a context-parallel ring's sends) do."""
    named, unit = None, 1
    for dim in _registry.values():
        if dim.fold_unit is not None and dim.degree(parallel) > 1:
            for group in dim.groups:
                if inside and not group.ring:
                    continue
                block = block_layout(group, parallel)[0] if (
                    group.peering is Peering.BLOCK) else 1
                named = named or (dim if block > 1 else None)
                unit = math.lcm(unit, block)
    return named, unit


def strategy_summary(parallel: ParallelConfig) -> str:
    """The degrees of ``parallel`` as a summary prints them (``"tp 4 · pp 2 · dp 8"``)."""
    printed = (dim.printed(dim.degree(parallel)) for dim in _registry.values()
               if dim.set_in is None or dim.set_in(parallel))
    return " · ".join(p for p in printed if p is not None)


def async_handle(group: str, label: str) -> str:
    """The handle of an asynchronous call among ``group``: its label, kept apart from
    other groups' handles of the same label by the group's name."""
    return f"{group}:{label}"


def register(dim: Dimension) -> Dimension:
    """Add ``dim`` to the registry (after the others).  A ValueError (a programmer's
    mistake, not a user's) if its name or one of its communicators' names is taken, or if
    it has a :attr:`Peering.BLOCK` communicator but is no folding unit: a block's traffic
    must stay inside the unit the iteration folds replicas by."""
    taken = peer_groups()
    if dim.name in _registry or any(group.name in taken for group in dim.groups):
        raise ValueError(f"parallelism dimension {dim.name!r} or one of its groups "
                         "is registered already")
    if dim.fold_unit is None and any(g.peering is Peering.BLOCK for g in dim.groups):
        raise ValueError(f"parallelism dimension {dim.name!r} meets in blocks of replicas "
                         "but has no fold_unit: give it one (its blocks are what the "
                         "iteration folds by)")
    _registry[dim.name] = dim
    return dim


@contextmanager
def registered(dim: Dimension) -> Iterator[Dimension]:
    """``dim`` registered for the ``with`` block only (tests, experiments)."""
    register(dim)
    try:
        yield dim
    finally:
        del _registry[dim.name]
