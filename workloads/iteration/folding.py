"""Replica folding: which data-parallel replicas are alike, so one stands for the rest.

The iteration (:mod:`workloads.iteration.simulator`) runs the units this module says to
run, and enters their flows with their images'; this module only decides, before the run,
from the streams and the collective plans: :func:`fold_check` (which units run, and the
sentence that says so) and :func:`exclusive_tp` (whether tensor-parallel collectives may
be timed by their closed form).

**Symmetry folding.**  Data-parallel replicas that run the same schedule on the same view
of the fabric are simulated once.  With expert parallelism the unit of folding is an
expert-parallel block of ``ep`` consecutive replicas (its all-to-alls stay inside it); else
it is one replica.  Under a uniform router and without a straggler the replicas of a
block run one schedule, so folding goes *inside* the blocks (:func:`fold_plan`): the unit
is again one replica (one context-parallel ring where there are rings), and the blocks'
all-to-alls are treated as the data-parallel collectives are — run in full over every
block's lanes (each simulated lane entered with the same lane of the other blocks as one
coflow, as a folded block's were), started when the simulated members arrive and done
when the simulated block's lanes are; the fold check classes each lane as a flow that
spans units, tied to its block's units (they start it and wait for it).  Only where it
finds classes that fit the blocks (:func:`_block_sources`: each block's call is one
meeting of simulated members); else the block is the unit.  Flat NCCL all-to-alls and
DeepEP's (node-limited or not) fold so on the fabrics the tests draw; a hierarchical
all-to-all, which gathers a node's tokens through some of its GPUs, loads a block's
replicas' links unalike beside their own traffic, so they fold into classes.

The units are split into classes of alike ones (:mod:`workloads.iteration.fold_classes`):
in each class the first unit is *simulated* and every other unit is its *image*, shifted
by a whole number of units.  A fabric that
treats every replica alike gives one class; one where a pipeline stage's boundary falls
inside a leaf's nodes gives a few (the replicas whose sends stay under the leaf, and those
whose sends cross the spines), each simulated once.  Folding is exact when the images see
what their simulated unit sees, which is checked constructively before the run
(:func:`fold_check`):

* same schedule and costs — no trace asked for (its spans are per rank group); a unit
  holding a straggler (a rank group that runs slower) is unlike the rest, so it is
  simulated on its own, beside the classes of the units without one — which are still
  images of each other, provided the straggler's unit shares no link of a
  folded flow class with them (its traffic runs at other times); its lateness reaches
  them only through the collectives that span replicas, which run in full;
* same fabric — the routing depends on the two ends only (D-mod-K, adaptive, spraying), not
  on a hash of the queue pair (ECMP), and for every flow class that is folded (each rank
  group's tensor-parallel collectives, by every algorithm ``auto`` may pick, each pipeline
  send between neighbouring stages, both ways, the tied-embedding all-reduces and, per
  block, the expert all-to-alls) every replica of a class sees the same links: as many, of
  the same capacities, crossed by the same streams, each shared with as many replicas of
  each class — pairwise disjoint (typical of D-mod-K on non-blocking trees and of
  rail-optimized fabrics), or shared evenly (adaptive spraying over spines) — and the
  same latency; a shared link carries the same streams from every replica on it; and
  with the streams of the data-parallel collectives that will run added (the plans of the
  stream's own calls, over every replica), each replica's most loaded link per step is as
  loaded as its class's.  A link is told by everything that crosses it: every folded
  class's members (not only one class's), and which data-parallel collectives, not only
  how many streams (each lane's collective is one flow whose rate its other links set),
  so the classing refines units and those flows together (``fold_classes``).  Where every
  replica is a class of its own, the full simulation runs.

Then every image's flow meets the same capacities, the same sharing and the same
replica-spanning load as the simulated one's, so under max-min fairness all move at one
rate.  These are necessary conditions read off the plans, not a proof over the whole
max-min solution; the tests compare against the full simulation on many strategies and
fabrics (random ones too) to hold them.  A folded flow is entered *with its images*: a
pipeline send is one flow over all replicas' pairs (a shared link's multiplicity is the
sum of the replicas' streams, so it is loaded as by their separate flows at their common
rate; its protocol is the one a replica alone would take), a tensor-parallel collective
run as flows is one coflow with its images' (at step fidelity their flows run beside it),
so is each lane of a block's expert all-to-all, and of the tied-embedding (or DualPipe
mirror) all-reduce between a replica's end stages, with the same lane of the images'
(:mod:`workloads.iteration.call_plans`; at step fidelity, or where a plan has several
steps, every image's lanes run beside it), and a collective timed by its closed form
records its images' link usage too.  So contention with replica-spanning traffic, and the
link statistics, count every replica's bytes.  Collectives that span
replicas — the data-parallel all-reduce / reduce-scatter / all-gather, the gradient
norm — run in full, over every replica's lanes; a meeting of folded groups completes when
the simulated members arrive (their images arrive at the same instant by symmetry).  At the
end the images' GPUs get their simulated group's accounting.  Otherwise the full simulation
runs; :attr:`IterationResult.folding` says which ran and why.  ``tests/workloads/
test_folding.py`` compares folded and full runs across strategies and fabrics to 1e-9.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from distsim_gpu.collectives import Communicator
from distsim_gpu.collectives.algorithms import gpu_rail
from distsim_gpu.collectives.plan import CollectivePlan
from distsim_gpu.collectives.pxn import pxn_applies
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.iteration.fold_classes import Member, SpanningFlow, alike_classes
from distsim_gpu.workloads.iteration.ops import Collective, Op
from distsim_gpu.workloads.iteration.rank_groups import stage_lanes
from distsim_gpu.workloads.iteration.records import IterationSpec
from distsim_gpu.workloads.iteration.timeline import RankGroup
from distsim_gpu.workloads.strategy.dimensions import (
    PeerGroup,
    Peering,
    block_layout,
    folding_unit,
    peer_degrees,
    peer_groups,
    stage_sets,
)
from distsim_gpu.workloads.strategy.expert_grid import BlockLanes
from distsim_gpu.workloads.strategy.parallel import ParallelConfig
from distsim_gpu.workloads.strategy.schedule import mirror_pair

#: A ring step's sender and receiver rank groups.
RingStep = tuple[RankGroup, RankGroup]

__all__ = ["MAX_FOLD_CLASSES", "dp_apart_from_tp", "exclusive_tp", "fold_check", "fold_plan",
           "unit_rows"]

# The most classes of alike replicas folding simulates; with more the full simulation runs.
# Each class's flows span its images' links, so many classes make the solver's connected
# components large: measured with benchmarks/bench_scale.py, GPT-3 on 10,752 H100s folded
# into 11 classes on a rail-optimized fabric ran in 30 s of CPU (full: 113 s), while the
# SuperPOD fabric's 84 classes took over 17 CPU minutes, unfinished (full: 233 s).
MAX_FOLD_CLASSES = 32


def fold_check(spec: IterationSpec, comm: Communicator, groups: list[list[RankGroup]],
                streams: list[list[Op]], unit: int, inside: bool = False,
                ) -> tuple[dict[int, tuple[int, ...]], str]:
    """Which units (replicas, or blocks of ``unit`` replicas) are simulated, each with the
    units it stands for (itself first; empty: the full simulation runs), and the sentence
    that says so (see the module docstring, *Symmetry folding*).  Units holding a
    straggler run on their own, beside one unit standing for all the others.  ``inside``:
    units inside expert blocks, whose all-to-alls run in full (:func:`fold_plan`)."""
    dp = spec.parallel.dp_cp
    # What a unit of more than one replica is (an expert-parallel block, a
    # context-parallel ring), for the sentence.
    named = folding_unit(spec.parallel, inside)[0]
    kind = None if named is None else named.fold_unit
    units = dp // unit
    if units <= 1:
        return {}, "full: one data-parallel replica" + (
            "" if unit == 1 or kind is None else f" {kind.noun} ({kind.spans} spans them all)")
    # The GPUs that set an off-nominal pace (a faster peer of a straggler sets none).
    slow = sorted(gpu for row in groups for g in row if g.slowdown != 1 for gpu in g.gpus
                  if spec.stragglers.get(gpu, 1.0) == g.slowdown)
    # A unit is unlike the others where one of its rank groups runs slower (a faster GPU
    # in a TP group waits for its peers: the group's pace is unchanged, and its images
    # share the simulated group's compute spans, which its own breakdown splits).
    odd = sorted({g.replica // unit for row in groups for g in row if g.slowdown != 1})
    healthy = [u for u in range(units) if u not in odd]
    # What breaks the symmetry first; a trace (spans per rank group) last, so that a
    # traced run names the same reason as an untraced one where it has one.
    why = ("full: folding off" if not spec.fold_replicas
           else f"full: stragglers on {', '.join(slow)}" if len(healthy) < 2
           else f"full: {spec.topology.routing.policy} routing may route replicas unalike"
           if not spec.topology.routing.folds_replicas
           else "")
    classes: list[list[int]] = []
    if not why:
        classes, why = _asymmetry(spec, comm, groups, streams, unit, healthy if odd else None,
                                  inside)
        why = why or ("full: a trace was asked for (spans per rank group)" if spec.trace
                      else "")
    if why:
        return {}, why
    what = ("data-parallel replicas" if unit == 1 or kind is None
            else f"{kind.adjective} {kind.noun}s of {unit}")
    # Positions among the healthy units -> units; each class's first unit stands for it.
    alike = [[healthy[p] for p in members] for members in classes]
    stands_for = {members[0]: tuple(members) for members in alike}
    stands_for.update({u: (u,) for u in odd})
    into = "1" if len(alike) == 1 else (
        f"{len(alike)} classes of alike ones (" + ", ".join(
            str(len(members)) for members in alike) + ")")
    if inside:
        block = folding_unit(spec.parallel)[1]
        return stands_for, (f"folded {units} {what} into {into} inside expert-parallel "
                            f"blocks of {block} (a uniform router: their all-to-alls run "
                            "in full)")
    if not odd:
        return stands_for, f"folded {units} {what} into {into}"
    if unit == 1 or kind is None:
        alone = "replica" + ("s " if len(odd) > 1 else " ") + ", ".join(map(str, odd))
    else:  # an expert-parallel block or a context-parallel ring, by its replicas
        alone = (f"the {kind.noun}{'s' if len(odd) > 1 else ''} of replicas " + ", ".join(
            f"{u * unit}-{u * unit + unit - 1}" for u in odd))
    return stands_for, (f"folded {len(healthy)} {what} without a straggler into {into}; "
                        f"{alone} (stragglers on {', '.join(slow)}) simulated on "
                        f"{'their' if len(odd) > 1 else 'its'} own")


# Per flow class, per replica (or expert-parallel block), the plans it runs.
_Classes = list[tuple[str, list[list[CollectivePlan]]]]


def _asymmetry(spec: IterationSpec, comm: Communicator, groups: list[list[RankGroup]],
               streams: list[list[Op]], unit: int, healthy: list[int] | None = None,
               inside: bool = False) -> tuple[list[list[int]], str]:
    """The classes of alike units (positions among ``healthy``, or among all units), and
    why folding cannot run ("" when it can): see :func:`_members` per flow class, with the
    load of the data-parallel collectives, and :mod:`workloads.iteration.fold_classes`.
    With ``healthy`` (the units without a straggler) only those are classed, and the
    rest (simulated on their own, at their own pace) must share no link of a folded
    class with them.  ``inside``: the expert blocks' collectives span units, as the
    data-parallel ones do (their lanes are spanning flows, each tied to its block's
    units), instead of being a unit's folded flow class."""
    calls = [_calls(stream) for stream in streams]
    layouts = {name: block_layout(peer, spec.parallel) for name, peer in peer_groups().items()
               if peer.peering is Peering.BLOCK}
    blocks = {name: layouts.pop(name) for name, peer in peer_groups().items()
              if inside and name in layouts and not peer.ring}
    load, spanning = _spanning(comm, groups, calls, spec.parallel)
    _block_spanning(comm, groups, calls, blocks, unit, (load, spanning))
    alike = groups if healthy is None else unit_rows(groups, healthy, unit)
    odd = None if healthy is None else unit_rows(
        groups, [u for u in range(len(groups[0]) // unit) if u not in healthy], unit)
    wrap = spec.parallel.interleave > 1
    members: list[list[Member]] = []
    for stage in range(len(groups)):
        why = _tp_candidates_differ(comm, groups[stage])
        classes = [] if why else _flow_classes(comm, alike, stage, calls[stage], unit, wrap,
                                               layouts)
        if not why and odd is not None:
            theirs = _flow_classes(comm, odd, stage, calls[stage], unit, wrap, layouts)
            if not _class_links(classes).isdisjoint(_class_links(theirs)):
                why = "a straggler's replica shares links with the others"
        for label, per_replica in classes:
            per_unit = len(per_replica) == len(alike[stage])  # else one entry per unit
            members.append(_members(comm, label, per_replica, load, unit if per_unit else 1))
        if why:
            return [], f"full: stage {stage} {why}"
    units = len(alike[0]) // unit
    alike_units = alike_classes(members, units, spanning)
    if len(alike_units) == units:
        return [], "full: no two data-parallel replicas see the fabric alike"
    if len(alike_units) > MAX_FOLD_CLASSES:
        return [], (f"full: {len(alike_units)} classes of alike replicas (folding runs "
                    f"{MAX_FOLD_CLASSES} at most)")
    return alike_units, ""


def unit_rows(groups: list[list[RankGroup]], units: list[int],
               unit: int) -> list[list[RankGroup]]:
    """Each stage's rank groups of the given units, in order."""
    return [[row[u * unit + k] for u in units for k in range(unit)] for row in groups]


def _class_links(classes: _Classes) -> set[Any]:
    return {link for _label, per_replica in classes for plans in per_replica
            for plan in plans for step in plan.steps for link in step.link_streams}


def _tp_candidates_differ(comm: Communicator, row: list[RankGroup]) -> str:
    """Why a stage's TP groups are not alike already in the algorithms ``auto`` weighs
    for them (CollNet where one group's switches reduce in the network and another's
    do not): "" when every group has the same candidates."""
    if len(row[0].gpus) == 1:
        return ""
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        if len({comm.candidates(op, list(g.gpus)) for g in row}) > 1:
            return f"tensor-parallel groups may pick different {op} algorithms"
    return ""


def _calls(stream: list[Op]) -> set[tuple[str, str, float]]:
    """The distinct (peers, op, size) of a stream's collectives among rank groups that
    run as flows (a latency-bound one puts none on any link: it cannot tell replicas
    apart)."""
    own = {name for name, peer in peer_groups().items() if peer.peering is Peering.OWN}
    return {(op.group, op.op, op.size_bytes) for op in stream
            if isinstance(op, Collective) and op.group not in own and op.op is not None
            and op.size_bytes is not None and not op.latency_bound}


def _flow_classes(comm: Communicator, groups: list[list[RankGroup]], stage: int,
                  calls: set[tuple[str, str, float]], unit: int, wrap: bool,
                  layouts: dict[str, tuple[int, BlockLanes]]) -> _Classes:
    """The traffic of one stage that folding enters with its images: TP collectives (by
    every algorithm ``auto`` may pick), pipeline sends both ways (from the last stage to
    the first too when ``wrap``: interleaved), tied-embedding all-reduces, expert
    all-to-alls (per block), context-parallel ring sends (per ring)."""
    row, pp = groups[stage], len(groups)
    tp = len(row[0].gpus)
    classes: _Classes = []
    if tp > 1:
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            for algo in comm.candidates(op, list(row[0].gpus)):
                classes.append((op, [[comm.plan(op, list(g.gpus), algorithm=algo,
                                                protocol="simple")] for g in row]))
    if pp > 1 and (stage + 1 < pp or wrap):
        ahead = groups[(stage + 1) % pp]
        for forward in (True, False):  # activations, and gradients coming back
            classes.append(("p2p", [[comm.pairs_plan(
                list(zip(a.gpus, b.gpus) if forward else zip(b.gpus, a.gpus)), 1.0,
                protocol="simple")] for a, b in zip(row, ahead)]))
    peers = peer_groups()
    for name, op, size in sorted(calls):
        peer = peers.get(name)
        if peer is not None:
            classes.extend(_call_class(comm, groups, row, peer, (op, size), unit, layouts))
    return classes


def _unit_lanes(row: list[RankGroup], start: int, unit: int,
                layout: tuple[int, BlockLanes]) -> list[list[str]]:
    """The communicators (GPU lists) of the blocks in the unit of ``row`` at ``start``."""
    block, lanes = layout
    return [[row[s + r].gpus[t] for r, t in lane] for s in range(start, start + unit, block)
            for lane in lanes]


def _call_class(comm: Communicator, groups: list[list[RankGroup]], row: list[RankGroup],
                peer: PeerGroup, call: tuple[str, float], unit: int,
                layouts: dict[str, tuple[int, BlockLanes]]) -> _Classes:
    """The flow class of one collective call ``(op, size)`` among ``peer`` of ``row``'s
    groups that folding enters with its images (none for data-parallel ones: they span
    replicas and run in full).  A block's (expert all-to-alls, context-parallel ring
    steps) is per unit: the block is the unit — unless folded inside it (then not in
    ``layouts``: its lanes span units, :func:`_block_spanning`)."""
    op, size = call
    if peer.peering is Peering.ENDS:  # the row's stage and its mirror
        low, high = mirror_pair(row[0].stage, len(groups))
        lanes = [[[a, b] for a, b in zip(first.gpus, last.gpus)]
                 for first, last in zip(groups[low], groups[high])]
    elif peer.peering is Peering.BLOCK and peer.name in layouts:  # per unit: the blocks'
        lanes = [_unit_lanes(row, b, unit, layouts[peer.name])
                 for b in range(0, len(row), unit)]
        if peer.ring:  # every lane's sends to the next rank
            return [(f"{peer.name} ring", [[comm.pairs_plan(
                [(lane[i], lane[(i + 1) % len(lane)]) for lane in mine
                 for i in range(len(lane))], 1.0, protocol="simple")] for mine in lanes])]
    else:  # spanning units (data-parallel; expert blocks folded inside): run in full
        return []
    return [(op, [[comm.choose(op, lane, size) for lane in mine] for mine in lanes])]


def _spanning(comm: Communicator, groups: list[list[RankGroup]],
              calls: list[set[tuple[str, str, float]]], parallel: ParallelConfig,
              ) -> tuple[dict[Any, float], list[SpanningFlow]]:
    """The data-parallel collectives that will run (every call's, every lane's): per
    link the streams they put on it, and each as a flow of its own (its links' streams
    per step) for the classing to tell apart."""
    load: dict[Any, float] = {}
    flows: list[SpanningFlow] = []
    spanning = {name: peer for name, peer in peer_groups().items()
                if peer.peering is Peering.STAGE}
    for stage, row in enumerate(groups):
        lanes = {name: stage_lanes(row, parallel.tp, stage_sets(peer, parallel))
                 for name, peer in spanning.items()}  # once a stage, not once a call
        for name, op, size in sorted(calls[stage]):
            for lane in lanes.get(name, ()):
                _add_spanning(comm.choose(op, lane, size), (stage, name, op, size),
                              (), (load, flows))
    return load, flows


def _add_spanning(plan: CollectivePlan, call: tuple[Any, ...], units: tuple[int, ...],
                  into: tuple[dict[Any, float], list[SpanningFlow]]) -> None:
    """One lane's ``plan`` of ``call`` (stage, group, op, size) run in full: its streams
    onto ``into``'s per-link load, and the lane as a spanning flow (tied to ``units``)."""
    load, flows = into
    for step in plan.steps:
        for link, streams in step.link_streams.items():
            load[link] = load.get(link, 0.0) + streams * step.repeat
    flows.append(SpanningFlow(_link_profile([plan]), (*call, plan.algorithm,
                                                      plan.latency_s), units))


def _block_spanning(comm: Communicator, groups: list[list[RankGroup]],
                    calls: list[set[tuple[str, str, float]]],
                    blocks: dict[str, tuple[int, BlockLanes]], unit: int,
                    into: tuple[dict[Any, float], list[SpanningFlow]]) -> None:
    """Folded inside expert blocks, their calls run in full over every block's lanes, as
    the data-parallel collectives do: add each lane's streams to ``into``'s load and each
    lane as a spanning flow tied to its block's units (they start it and wait for it, so
    a unit whose block's lanes run unalike is unlike the others)."""
    for stage, row in enumerate(groups):
        for name, op, size in sorted(calls[stage]):
            if name not in blocks:
                continue
            block = blocks[name][0]
            for start in range(0, len(row), block):
                units = tuple(range(start // unit, (start + block) // unit))
                for lane in _unit_lanes(row, start, block, blocks[name]):
                    _add_spanning(comm.choose(op, lane, size), (stage, name, op, size),
                                  units, into)


def fold_plan(spec: IterationSpec, comm: Communicator, groups: list[list[RankGroup]],
              streams: list[list[Op]],
              ) -> tuple[int, dict[int, tuple[int, ...]], str, dict[int, list[int]] | None]:
    """The folding unit in replicas, the units simulated with those each stands for (as
    :func:`fold_check`), the sentence, and, folded inside expert blocks, per block that
    holds simulated units the blocks it stands for (itself first; None: not inside).

    With expert parallelism the unit is a whole block: its all-to-alls stay inside it.
    Under a uniform router and without a straggler every replica of a block runs the same
    schedule, so one replica (one context-parallel ring, where there are rings) may stand
    for others of its block and of other blocks: the blocks' all-to-alls then run in full
    over every lane, as the data-parallel collectives do; a block's call starts when its
    simulated members arrive and ends when its lanes end, and runs the lanes of the
    blocks it stands for beside its own (their members arrive, and their lanes end, at
    the same instants by symmetry, which the fold check holds: each lane is a spanning
    flow tied to its block's units).  Only where every block's units stand for, and are
    stood for by, the units of one block (:func:`_block_sources`); else the block is the
    unit, as before."""
    par = spec.parallel
    unit = folding_unit(par)[1]
    inner = folding_unit(par, inside=True)[1]
    spans = {block_layout(peer, par)[0] for peer in peer_groups().values()
             if peer.peering is Peering.BLOCK and not peer.ring} - {1}  # (1: nobody meets)
    router = spec.model.moe.is_default and len(set(spec.comm.alltoall_weights)) <= 1
    if (spec.fold_replicas and router and inner < unit and spans == {unit}
            and unit % inner == 0 and all(g.slowdown == 1 for row in groups for g in row)):
        stands_for, sentence = fold_check(spec, comm, groups, streams, inner, inside=True)
        sources = _block_sources(stands_for, unit // inner, par.dp_cp // inner)
        if sources is not None:
            return inner, stands_for, sentence, sources
    stands_for, sentence = fold_check(spec, comm, groups, streams, unit)
    return unit, stands_for, sentence, None


def _block_sources(stands_for: dict[int, tuple[int, ...]], per_block: int,
                   units: int) -> dict[int, list[int]] | None:
    """Per block holding simulated units, the blocks whose all-to-alls its call runs (itself
    first), where each block's units are all stood for by simulated units of one block
    (its source) that stand for the same units of it as of the source itself: then the
    source's members meeting is when every such block's members meet.  None otherwise
    (or where nothing folds)."""
    rep = {image: simulated for simulated, images in stands_for.items() for image in images}
    if len(rep) != units:
        return None
    reps = [frozenset(rep[u] for u in range(b * per_block, (b + 1) * per_block))
            for b in range(units // per_block)]
    sources: dict[int, list[int]] = {}
    for block, theirs in enumerate(reps):
        source = {u // per_block for u in theirs}
        if len(source) != 1 or reps[min(source)] != theirs:
            return None
        sources.setdefault(min(source), []).append(block)
    return sources


def _members(comm: Communicator, label: str, per_replica: list[list[CollectivePlan]],
             load: dict[Any, float], unit: int) -> list[Member]:
    """One flow class's plans, per replica (``unit``: replicas per unit; 1 where the
    class has one entry per unit), as :class:`Member` s to class.  What must match for
    two replicas to be images: the links, as many, of the same capacities, crossed by as
    many streams in each step and by as many of the data-parallel collectives' streams,
    each shared with as many replicas of the same classes putting the same streams on it
    (a class's flow is entered once with its images' multiplicities summed: a link is
    loaded as by their separate flows at the rate they share by symmetry), and the same
    latency.  With the data-parallel collectives' streams added, the most
    loaded link (streams per byte/s) of each step must be as loaded: a ring that crosses
    between leaves beside some replicas only adds to links that do not limit them; one
    that loads some replicas' bottleneck more makes them slower."""
    profiles = [_link_profile(plans) for plans in per_replica]
    count: dict[Any, int] = {}
    for profile in profiles:
        for link in profile:
            count[link] = count.get(link, 0) + 1
    members = []
    for replica, (plans, profile) in enumerate(zip(per_replica, profiles)):
        fixed = (label, tuple(plan.latency_s for plan in plans),
                 _pressure(comm, profile, count, load))
        links = {link: (comm.capacity[link], streams, load.get(link, 0.0))
                 for link, streams in profile.items()}
        members.append(Member(replica // unit, replica % unit, links, fixed))
    return members


def _pressure(comm: Communicator, profile: dict[Any, tuple[float, ...]],
              count: dict[Any, int], load: dict[Any, float]) -> tuple[float, ...]:
    """Per step, the most streams per byte/s on a link: the class's (times the replicas
    sharing it) and the data-parallel collectives' (rounded to 12 digits)."""
    width = len(next(iter(profile.values()), ()))
    worst = [0.0] * width
    for link, streams in profile.items():
        extra, capacity = load.get(link, 0.0), comm.capacity[link]
        for i, mine in enumerate(streams):
            if mine:
                worst[i] = max(worst[i], (mine * count[link] + extra) / capacity)
    return tuple(float(f"{w:.12g}") for w in worst)


def _link_profile(plans: list[CollectivePlan]) -> dict[Any, tuple[float, ...]]:
    """Per link some plans cross, its streams in each step of each plan."""
    width = sum(len(plan.steps) for plan in plans)
    profile: dict[Any, list[float]] = {}
    i = 0
    for plan in plans:
        for step in plan.steps:
            for link, streams in step.link_streams.items():
                profile.setdefault(link, [0.0] * width)[i] = streams
            i += 1
    return {link: tuple(streams) for link, streams in profile.items()}


def exclusive_tp(comm: Communicator, groups: list[list[RankGroup]],
                  par: ParallelConfig) -> bool:
    """Whether TP collectives may be timed by their closed form before data parallelism.

    Only traffic that can run *while* a TP group computes could share its links:
    pipeline sends (asynchronous), a context-parallel ring's sends and other TP groups.
    Expert all-to-alls block every group they involve, and data-parallel collectives
    start only after every replica of the stage launched them — after which the stage's
    stream runs its TP collectives as flows (see
    :class:`workloads.iteration.streams.StreamBuilder`) — so neither can overlap a
    closed-form TP collective.  A ring's step runs once every member has launched it, and
    each member waits for it before its next TP collective (no stream holds one between
    a ring step's launch and its wait: ``OverlappedOps._cp_attention``), so its sends may
    use its own members' TP links (tp · cp inside a node), never another group's.
    """
    if par.tp == 1:
        return True
    seen: set[Any] = set()
    own: dict[int, set[Any]] = {}  # each group's TP links, by id
    for stage_groups in groups:
        for group in stage_groups:
            # Every algorithm auto may pick (NVLS, CollNet… where offered).
            links = own[id(group)] = _tp_links(comm, list(group.gpus))
            if links & seen:
                return False
            seen |= links
    topo = comm.topology
    # TP links all inside nodes (the usual case): only the sends' legs inside nodes can
    # meet them, and those need no walk over the fabric (Topology.node_legs) — at 16,384
    # GPUs that walk, for every send of every replica, was most of this check.
    in_node = all(topo.in_node(link) for link in seen)
    for pairs, ring in _async_send_pairs(groups, par):
        legs = _node_legs(topo, pairs) if in_node else None
        if legs is None:
            legs = comm.plan_links(comm.pairs_plan(pairs, 1.0, protocol="simple"))
        shared = seen & legs
        if ring is not None:
            shared -= own[id(ring[0])] | own[id(ring[1])]
        if shared:
            return False
    return True


_ALL_OPS = ("all_reduce", "all_gather", "reduce_scatter")


def _tp_links(comm: Communicator, gpus: list[str],
              ops: tuple[str, ...] = _ALL_OPS) -> set[Any]:
    """Every link a collective ``ops`` of ``gpus`` may use, whatever algorithm auto picks."""
    links: set[Any] = set()
    for op in ops:
        for algo in comm.candidates(op, gpus):
            links |= comm.plan_links(comm.plan(op, gpus, algorithm=algo, protocol="simple"))
    return links


def dp_apart_from_tp(comm: Communicator, groups: list[list[RankGroup]],
                     par: ParallelConfig) -> bool:
    """Whether data-parallel collectives (gradient reduce-scatter and parameter all-gather
    under ZeRO, else the gradient all-reduce) never use a link of any TP group, whatever
    algorithm auto picks.

    Then a TP collective stays exclusive while they are in flight — the usual case of TP
    inside an NVLink node and DP across nodes on the NIC rails — and its closed form stays
    exact.  A rank's data-parallel communicator is its rank in every replica of its
    stage: the dp·cp replicas under context parallelism (Megatron reduces gradients over
    both).  Not with expert parallelism (its gradients reduce over expert groups of their
    own) nor uneven layer groups: False there.
    """
    if par.tp == 1 or par.dp_cp <= 1:
        return par.tp == 1
    if getattr(par, "ep", 1) > 1:
        return False
    # ZeRO's gradient reduce-scatter and parameter all-gather, else one all-reduce.
    dp_ops = ("reduce_scatter", "all_gather") if par.zero >= 1 else ("all_reduce",)
    tp_links: set[Any] = set()
    for stage_groups in groups:
        for group in stage_groups:
            tp_links |= _tp_links(comm, list(group.gpus))
    for stage_groups in groups:
        width = len(stage_groups[0].gpus)
        if any(len(group.gpus) != width for group in stage_groups):
            return False
        for rank in range(width):
            gpus = [group.gpus[rank] for group in stage_groups]
            if not tp_links.isdisjoint(_tp_links(comm, gpus, dp_ops)):
                return False
    return True


def _async_send_pairs(groups: list[list[RankGroup]], par: ParallelConfig,
                      ) -> Generator[tuple[list[tuple[str, str]], RingStep | None], None, None]:
    """The GPU pairs of every asynchronous send between rank groups, one list per group
    and destination: pipeline neighbours (both ways; around the ring when interleaved),
    with None, and the next rank group of a ring communicator (context parallelism's),
    with the two groups."""
    # A ring's sends run while groups compute; its block is its dimension's degree.
    degrees = peer_degrees(par)
    rings = [degrees[name] for name, peer in peer_groups().items()
             if peer.ring and degrees[name] > 1]
    # a2a+p2p's rings join the same position of each all-to-all group (dimensions.cp_lanes).
    stride = par.cp_a2a_size if par.cp_comm_type == "a2a+p2p" else 1
    for stage in range(par.pp):
        for replica in range(par.dp_cp):
            group = groups[stage][replica]
            here = group.gpus
            for size in rings:
                nxt = groups[stage][replica // size * size + (replica + stride) % size]
                yield list(zip(here, nxt.gpus)), (group, nxt)
            for neighbour in (stage - 1, stage + 1):
                if 0 <= neighbour < par.pp or par.interleave > 1:
                    there = groups[neighbour % par.pp][replica].gpus
                    if there != here:
                        yield list(zip(here, there)), None


def _node_legs(topo: Topology, pairs: list[tuple[str, str]]) -> set[Any] | None:
    """The links inside nodes of the routes the sends ``pairs`` take (each on its
    sender's rail across nodes, as :func:`collectives.algorithms.pairs_plan` routes
    them); None where some route is not shaped for :meth:`Topology.node_legs` or some send
    goes through PXN."""
    legs: set[Any] = set()
    if pxn_applies(topo, pairs):
        return None  # a send forwarded over NVLink (PXN) crosses more than its two legs
    for src, dst in pairs:
        rail = gpu_rail(topo, src) if topo.node_of(src) != topo.node_of(dst) else None
        found = topo.node_legs(src, dst, rail=rail)
        if found is None:
            return None
        legs.update(found)
    return legs
