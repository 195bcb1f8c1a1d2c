"""MoE routing as it runs: skewed token shares, capacity and dropped tokens, expert placement.

A MoE layer's router sends each token to ``top_k`` experts.  Real routers are not uniform:
a few experts take far more tokens than the rest (GShard, Switch Transformer and FlexMoE
report it), and with expert parallelism the EP rank holding the most loaded experts sets
the pace of the whole layer — every rank waits for it in the combine all-to-all.

``model.moe`` in a scenario describes it (:class:`MoeRouting`):

* ``routing`` — the share of token assignments each expert receives: ``uniform``,
  ``{zipf: s}`` (expert ``i`` — ranks given to experts in index order — gets a share
  proportional to ``1/(i+1)^s``) or ``{histogram: [...]}`` (one non-negative count per
  expert, normalised).  A token picks ``top_k`` *distinct* experts, so no expert can take
  more than ``1/top_k`` of the assignments: shares above it are capped and the excess
  spread over the others in proportion (water-filling).
* ``capacity_factor`` — GShard / Switch capacity: each expert keeps at most
  ``capacity_factor · tokens·top_k/experts`` assignments and drops the rest (a dropped
  token skips the expert, its compute and its all-to-all bytes); ``null`` (the default)
  means dropless (Megablocks, Megatron-Core's default).
* ``placement`` — which EP rank holds which expert, ``experts/ep`` each: ``round-robin``
  (expert ``e`` on rank ``e mod ep``; the default), ``contiguous`` (rank ``r`` holds
  experts ``r·E/ep … (r+1)·E/ep - 1``, Megatron-Core's layout), ``balanced`` (FlexMoE's
  re-balancing as a what-if: greedy bin-packing, heaviest expert first onto the least
  loaded rank with a free slot) or an explicit list giving each expert's rank.

Everything is deterministic from the spec.  Every EP rank routes its own tokens with the
same shares, so rank ``s`` sends rank ``d`` the share of its assignments that ``d``'s
experts keep: :func:`receive_weights` gives it relative to the uniform ``1/ep``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from distsim_gpu.collectives.params import CommParams
from distsim_gpu.simcore.config import check_choice, check_keys, check_mapping, check_number
from distsim_gpu.simcore.errors import ConfigError

__all__ = [
    "UNIFORM",
    "MoeLoads",
    "MoeRouting",
    "check_placement",
    "describe_loads",
    "expert_capacity",
    "expert_shares",
    "moe_from_mapping",
    "moe_loads",
    "moe_pace",
    "place_experts",
    "routed_comm",
]

PLACEMENTS = ("round-robin", "contiguous", "balanced")
_KEYS = ("routing", "capacity_factor", "placement")


@dataclass(frozen=True, slots=True)
class MoeRouting:
    """How a MoE layer's router spreads tokens (see the module docstring).

    ``kind`` is ``uniform``, ``zipf`` (exponent ``zipf_s``) or ``histogram``
    (``histogram``: one count per expert); ``capacity_factor`` 0 means dropless;
    ``placement`` a name of :data:`PLACEMENTS` or a tuple of EP ranks, one per expert.
    ``routing_given``: whether a scenario chose the routing (``routing: uniform``
    included) rather than leaving it at its default; it says nothing of the loads, and
    routings equal but for it compare equal.
    """

    kind: str = "uniform"
    zipf_s: float = 0.0
    histogram: tuple[float, ...] = ()
    capacity_factor: float = 0.0
    placement: str | tuple[int, ...] = "round-robin"
    routing_given: bool = field(default=True, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The ``model.moe`` mapping that reads back as this routing."""
        routing: Any = {"uniform": "uniform", "zipf": {"zipf": self.zipf_s},
                        "histogram": {"histogram": list(self.histogram)}}[self.kind]
        placement = (list(self.placement) if isinstance(self.placement, tuple)
                     else self.placement)
        return {"routing": routing, "capacity_factor": self.capacity_factor or None,
                "placement": placement}

    @property
    def is_default(self) -> bool:
        """Uniform, dropless: the layer every EP rank runs alike (the plain model)."""
        return self.kind == "uniform" and self.capacity_factor == 0.0


@dataclass(frozen=True, slots=True)
class MoeLoads:
    """One MoE layer's token assignments for one micro-batch of every EP rank.

    ``expert_load`` (assignments routed to each expert) and ``expert_kept`` (after the
    capacity), ``rank_of_expert``, ``rank_load`` (kept assignments per EP rank).
    """

    assignments: float
    expert_load: tuple[float, ...]
    expert_kept: tuple[float, ...]
    rank_of_expert: tuple[int, ...]
    rank_load: tuple[float, ...]

    @property
    def dropped(self) -> float:
        """Assignments dropped by the capacity: ``Σ max(0, load - capacity)``."""
        return sum(self.expert_load) - sum(self.expert_kept)

    @property
    def max_rank_load(self) -> float:
        return max(self.rank_load)

    @property
    def mean_rank_load(self) -> float:
        return sum(self.rank_load) / len(self.rank_load)

    @property
    def imbalance(self) -> float:
        """Max over mean kept load per EP rank (1 when balanced)."""
        mean = self.mean_rank_load
        return self.max_rank_load / mean if mean else 1.0

    @property
    def pace_factor(self) -> float:
        """The slowest EP rank's expert work relative to a uniform, dropless layer's:
        ``max_r load_r / (assignments/ep)``.  Scales the expert compute of every rank,
        as every rank waits for the slowest in the combine."""
        uniform = self.assignments / len(self.rank_load)
        return self.max_rank_load / uniform if uniform else 1.0

    def receive_weights(self) -> tuple[float, ...]:
        """Per EP rank, the share of every rank's assignments it receives, relative to
        the uniform ``1/ep`` (1 each for a uniform dropless layer)."""
        ep = len(self.rank_load)
        return tuple(load * ep / self.assignments if self.assignments else 1.0
                     for load in self.rank_load)


def expert_shares(routing: MoeRouting, experts: int, top_k: int = 1) -> tuple[float, ...]:
    """Each expert's share of the assignments (sums to 1, none above ``1/top_k``)."""
    if routing.kind == "uniform":
        raw = [1.0] * experts
    elif routing.kind == "zipf":
        raw = [1.0 / (i + 1) ** routing.zipf_s for i in range(experts)]
    else:
        raw = list(routing.histogram)
    total = sum(raw)
    return _cap_shares([r / total for r in raw], 1.0 / top_k)


def _cap_shares(shares: list[float], cap: float) -> tuple[float, ...]:
    """Water-filling: shares above ``cap`` are set to it and the excess spread over the
    uncapped experts in proportion to their shares, until none exceeds it."""
    capped = [False] * len(shares)
    while True:
        over = [i for i, s in enumerate(shares) if s > cap * (1 + 1e-12) and not capped[i]]
        if not over:
            return tuple(shares)
        for i in over:
            capped[i] = True
        free = 1.0 - cap * sum(capped)
        rest = sum(s for i, s in enumerate(shares) if not capped[i])
        shares = [cap if capped[i] else (s * free / rest if rest else 0.0)
                  for i, s in enumerate(shares)]


def expert_capacity(routing: MoeRouting, *, assignments: float, experts: int) -> float:
    """Assignments one expert keeps: ``capacity_factor · assignments/experts`` (GShard);
    infinite when dropless."""
    if routing.capacity_factor <= 0:
        return float("inf")
    return routing.capacity_factor * assignments / experts


def place_experts(routing: MoeRouting, loads: Sequence[float], ep: int) -> tuple[int, ...]:
    """The EP rank of each expert, ``experts/ep`` per rank."""
    experts = len(loads)
    per_rank = experts // ep
    placement = routing.placement
    if isinstance(placement, tuple):
        return placement
    if placement == "round-robin":
        return tuple(e % ep for e in range(experts))
    if placement == "contiguous":
        return tuple(e // per_rank for e in range(experts))
    # balanced: longest-processing-time-first greedy with a slot limit per rank.
    rank_of = [0] * experts
    rank_load = [0.0] * ep
    slots = [per_rank] * ep
    for e in sorted(range(experts), key=lambda i: (-loads[i], i)):
        rank = min((r for r in range(ep) if slots[r]), key=lambda r: (rank_load[r], r))
        rank_of[e] = rank
        rank_load[rank] += loads[e]
        slots[rank] -= 1
    return tuple(rank_of)


def moe_loads(routing: MoeRouting, *, tokens: float, experts: int, top_k: int,
              ep: int) -> MoeLoads:
    """Loads of one MoE layer when each of ``ep`` ranks routes ``tokens`` tokens."""
    check_placement(routing, experts=experts, ep=ep)
    assignments = tokens * top_k * ep
    load = tuple(share * assignments for share in expert_shares(routing, experts, top_k))
    cap = expert_capacity(routing, assignments=assignments, experts=experts)
    kept = tuple(min(x, cap) for x in load)
    rank_of = place_experts(routing, load, ep)
    rank_load = [0.0] * ep
    for e, x in enumerate(kept):
        rank_load[rank_of[e]] += x
    return MoeLoads(assignments, load, kept, rank_of, tuple(rank_load))


#: The plain router: uniform shares, no capacity (every EP rank runs alike), by default.
UNIFORM = MoeRouting(routing_given=False)


def moe_pace(routing: MoeRouting, *, experts: int, top_k: int, ep: int) -> float:
    """:attr:`MoeLoads.pace_factor` of the router; exactly 1 for the plain one (so the
    plain model's numbers do not move by a rounding)."""
    if routing.is_default:
        return 1.0
    return moe_loads(routing, tokens=1.0, experts=experts, top_k=top_k, ep=ep).pace_factor


def alltoall_weights(routing: MoeRouting, *, experts: int, top_k: int,
                     ep: int) -> tuple[float, ...]:
    """Per EP rank, the share of the dispatch all-to-all it receives relative to uniform
    (``CommParams.alltoall_weights``); empty for the plain router or without EP."""
    if ep < 2 or routing.is_default:
        return ()
    # Shares, so any token count gives the same weights.
    return moe_loads(routing, tokens=1.0, experts=experts, top_k=top_k,
                     ep=ep).receive_weights()


def describe_loads(routing: MoeRouting, *, experts: int, top_k: int, ep: int) -> str:
    """One line on the router for a summary: per-EP-rank load max/mean, the slowest
    rank's pace against a uniform router, the dropped share."""
    loads = moe_loads(routing, tokens=1.0, experts=experts, top_k=top_k, ep=ep)
    kind = {"uniform": "uniform", "zipf": f"zipf {routing.zipf_s:g}",
            "histogram": "histogram"}[routing.kind]
    placement = (routing.placement if isinstance(routing.placement, str)
                 else "explicit placement")
    capacity = (f"capacity factor {routing.capacity_factor:g}" if routing.capacity_factor
                else "dropless")
    return (f"{experts} experts over ep {ep}, {kind}, {placement}, {capacity}: load per EP "
            f"rank max/mean {loads.imbalance:.3g}, slowest at {loads.pace_factor:.3g}x "
            f"uniform, {loads.dropped / loads.assignments * 100:.3g} % of assignments dropped")


class RoutedModel(Protocol):
    """What :func:`routed_comm` reads of a ``ModelSpec`` (models imports this module)."""

    @property
    def moe(self) -> MoeRouting: ...
    @property
    def experts(self) -> int: ...
    @property
    def top_k(self) -> int: ...


def routed_comm(comm: CommParams, model: RoutedModel, ep: int,
                source: str | None = None) -> CommParams:
    """``comm`` with the router's skew carried into the expert all-to-alls of a run at
    ``ep`` (an explicit placement checked against it), and for ``all_to_all: deepep`` its
    experts and top-k; ``comm`` itself for the plain router or without expert
    parallelism."""
    check_placement(model.moe, experts=model.experts, ep=ep, source=source)
    weights = alltoall_weights(model.moe, experts=model.experts, top_k=model.top_k, ep=ep)
    # DeepEP's exchange sends a token once per destination: it needs the router's shape.
    router = ((model.experts, model.top_k) if comm.all_to_all == "deepep" and ep > 1
              else (comm.moe_experts, comm.moe_top_k))
    if weights == comm.alltoall_weights and router == (comm.moe_experts, comm.moe_top_k):
        return comm
    return replace(comm, alltoall_weights=weights, moe_experts=router[0],
                   moe_top_k=router[1])


# --------------------------------------------------------------------------- parsing


def moe_from_mapping(data: Any, *, experts: int, ep: int | None = None,
                     source: str | None = None, prefix: str = "model.moe") -> MoeRouting:
    """``model.moe`` of a scenario, checked against the model's expert count and, when
    given, ``ep`` (else :func:`check_placement` checks an explicit placement later)."""
    raw = check_mapping(data, key=prefix, source=source, optional=True)
    check_keys(raw, _KEYS, prefix=prefix, source=source)
    if raw and experts < 2:
        raise ConfigError("routing needs a MoE model (experts > 1)", key=prefix,
                          source=source, hint="remove model.moe or set model.experts")
    kind, zipf_s, hist = _routing(raw.get("routing", "uniform"), experts, source,
                                  f"{prefix}.routing")
    cf = raw.get("capacity_factor")
    capacity_factor = 0.0 if cf is None else check_number(
        cf, key=f"{prefix}.capacity_factor", above=True, source=source,
        hint="null for dropless routing")
    placement = _placement(raw.get("placement", "round-robin"), experts, source,
                           f"{prefix}.placement")
    routing = MoeRouting(kind, zipf_s, hist, capacity_factor, placement,
                         routing_given="routing" in raw)
    if ep is not None:
        check_placement(routing, experts=experts, ep=ep, source=source,
                        key=f"{prefix}.placement")
    return routing


def _routing(value: Any, experts: int, source: str | None,
             key: str) -> tuple[str, float, tuple[float, ...]]:
    if value == "uniform":
        return "uniform", 0.0, ()
    hint = "uniform, {zipf: s} or {histogram: [one count per expert]}"
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ConfigError(f"must be {hint}, got {value!r}"[:200], key=key, source=source)
    ((name, arg),) = value.items()
    check_choice(name, ("zipf", "histogram"), key=key, source=source)
    if name == "zipf":
        return "zipf", check_number(arg, key=f"{key}.zipf", maximum=100.0, source=source), ()
    if not isinstance(arg, list) or len(arg) != experts:
        got = len(arg) if isinstance(arg, list) else repr(arg)[:60]
        raise ConfigError(f"a histogram needs one count per expert ({experts}), got {got}",
                          key=f"{key}.histogram", source=source, hint=hint)
    counts = tuple(check_number(x, key=f"{key}.histogram[{i}]", source=source)
                   for i, x in enumerate(arg))
    if not sum(counts) > 0:
        raise ConfigError("a histogram needs a count above 0", key=f"{key}.histogram",
                          source=source)
    if not math.isfinite(sum(counts)):  # (the shares divide by it)
        raise ConfigError("the counts sum past a double's range", key=f"{key}.histogram",
                          source=source, hint="counts are relative: scale them down")
    return "histogram", 0.0, counts


def _placement(value: Any, experts: int, source: str | None,
               key: str) -> str | tuple[int, ...]:
    if not isinstance(value, list):
        return check_choice(value, PLACEMENTS, key=key, source=source)
    if len(value) != experts:
        raise ConfigError(f"an explicit placement gives each of the {experts} experts its "
                          f"EP rank, got {len(value)} entries", key=key, source=source)
    for i, rank in enumerate(value):
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ConfigError(f"must be an EP rank (a whole number >= 0), got {rank!r}"[:120],
                              key=f"{key}[{i}]", source=source)
    return tuple(value)


def check_placement(routing: MoeRouting, *, experts: int, ep: int, source: str | None = None,
                    key: str = "model.moe.placement") -> None:
    """An explicit placement names EP ranks ``0..ep-1``, each holding ``experts/ep``."""
    ranks = routing.placement
    if not isinstance(ranks, tuple):
        return
    for i, rank in enumerate(ranks):
        if rank >= ep:
            raise ConfigError(f"must be an EP rank 0..{ep - 1}, got {rank}",
                              key=f"{key}[{i}]", source=source)
    per_rank = experts // ep
    for rank in range(ep):
        if ranks.count(rank) != per_rank:
            raise ConfigError(f"EP rank {rank} holds {ranks.count(rank)} experts, each must "
                              f"hold experts/ep = {per_rank}", key=key, source=source)
