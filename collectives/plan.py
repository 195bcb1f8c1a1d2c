"""A collective's plan: which links carry how many byte-streams, step by step.

An algorithm (ring, tree, …) turns a collective call into *steps*.  In one step several
*streams* run at once, each moving the same number of bytes — a fixed fraction of the
call's size — over one route; a link crossed by ``k`` streams of a step has multiplicity
``k``.  A plan does not depend on the size, so one plan serves a whole size sweep.

The two fidelities of DESIGN.md read the same plan:

* ``coflow`` — one flow for the whole call: size ``Σ_k repeat_k·fraction_k·S`` and on
  each link the stream count weighted by the bytes each step puts there, so that the flow
  moves exactly the plan's bytes over every link; latency is the sum of the steps';
* ``step`` — one flow per step, in sequence, each holding that step's links.

On an uncontended network both take ``base + Σ_k repeat_k·(latency_k +
b_k · max_l mult_lk/capacity_l)``; for a ring every step uses the same links, so the two
agree exactly.  Bytes on the wire are the payload divided by the protocol efficiency
``e``.

Pipelines (trees, chains) cut a stream into chunks that follow each other hop by hop: the
last chunk still has ``pipeline_hops`` hops to cross after the first one arrived, so a
stream costs ``b_k = fraction_k·S/e + pipeline_hops_k · min(chunk, fraction_k·S/e)``
bytes of time — the pipeline's fill and drain.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

__all__ = ["CollectivePlan", "StepShape"]

LinkId = Hashable


@dataclass(frozen=True, slots=True)
class StepShape:
    """``repeat`` identical steps; each moves ``fraction``·S bytes per stream.

    ``link_streams`` maps a link to the number of streams of the step that cross it;
    ``latency_s`` is paid once per step (hop latency of the protocol plus route latency).
    """

    link_streams: Mapping[LinkId, float]
    fraction: float
    latency_s: float
    repeat: int = 1
    pipeline_hops: int = 0

    def stream_bytes(self, wire_bytes: float, chunk_bytes: float) -> float:
        """Bytes-worth of time one stream of this step takes for a call of ``wire_bytes``."""
        share = self.fraction * wire_bytes
        return share + self.pipeline_hops * min(chunk_bytes, share)


@dataclass(frozen=True, slots=True)
class CollectivePlan:
    """How one collective call moves its bytes; independent of the size."""

    op: str
    algorithm: str
    protocol: str
    num_ranks: int
    channels: int
    steps: tuple[StepShape, ...]
    base_latency_s: float
    protocol_efficiency: float
    chunk_bytes: float = 0.0

    @property
    def latency_s(self) -> float:
        """Total latency of a call: base plus every step's latency."""
        return self.base_latency_s + sum(s.repeat * s.latency_s for s in self.steps)

    def coflow_bytes(self, size_bytes: float) -> float:
        """Wire bytes per stream of the single-flow form."""
        wire = size_bytes / self.protocol_efficiency
        return sum(s.repeat * s.stream_bytes(wire, self.chunk_bytes) for s in self.steps)

    def coflow(self, size_bytes: float) -> tuple[float, dict[LinkId, float]]:
        """Wire bytes per stream and link multiplicities of the single-flow form."""
        wire = size_bytes / self.protocol_efficiency
        per_step = [s.repeat * s.stream_bytes(wire, self.chunk_bytes) for s in self.steps]
        total = sum(per_step)
        if total == 0:
            return 0.0, {}
        weights: dict[LinkId, float] = {}
        for step, step_bytes in zip(self.steps, per_step):
            share = step_bytes / total
            for link, streams in step.link_streams.items():
                weights[link] = weights.get(link, 0.0) + streams * share
        return total, weights

    def seconds_per_byte(self, capacity: Mapping[LinkId, float]) -> tuple[float, ...]:
        """Per step, the time one stream byte takes on its slowest link, uncontended."""
        return tuple(max((streams / capacity[link]
                          for link, streams in step.link_streams.items()), default=0.0)
                     for step in self.steps)

    def uncontended_time_s(self, size_bytes: float, capacity: Mapping[LinkId, float], *,
                           seconds_per_byte: tuple[float, ...] | None = None) -> float:
        """Closed-form time of the call alone on the network (capacities in bytes/s).

        ``seconds_per_byte`` (from :meth:`seconds_per_byte`) saves recomputing the
        bottlenecks when the same plan is timed at many sizes.
        """
        if seconds_per_byte is None:
            seconds_per_byte = self.seconds_per_byte(capacity)
        wire = size_bytes / self.protocol_efficiency
        total = self.base_latency_s
        for step, slowest in zip(self.steps, seconds_per_byte):
            total += step.repeat * (step.latency_s
                                    + step.stream_bytes(wire, self.chunk_bytes) * slowest)
        return total
