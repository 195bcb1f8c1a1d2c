"""Whether the ranks' communication calls of a Chakra job meet, before anything runs.

A rank's ``k``-th collective on a process group meets its peers' ``k``-th on that group;
a send meets the receive of the same pair and ``comm_tag`` in order.  On a real cluster a
call whose traced peers never make it waits forever, and calls that meet but disagree
(an all-reduce against an all-gather, 1 MiB against 2 MiB) are a broken job.  A replay
that let the lone call finish, or ran one side's size, would report a time for a job that
cannot run; :func:`check_calls` refuses both, naming the calls.  Ranks without a trace
are taken to arrive with the last present rank (the replay's documented assumption), so
only traced peers are waited for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from distsim_gpu.measured.chakra import ChakraNode
from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.workloads.iteration.ops import Collective
from distsim_gpu.workloads.traces.replay import GraphNode

__all__ = ["Call", "check_calls"]


@dataclass(frozen=True, slots=True)
class Call:
    """One communication node of one rank: where it came from and what it became."""

    rank: int
    source: str
    node: ChakraNode
    graph: GraphNode

    @property
    def op(self) -> Collective:
        assert isinstance(self.graph.op, Collective)
        return self.graph.op

    def describe(self) -> str:
        """``rank 1's node 7 ('allreduce'): all_reduce of 1,048,576 bytes over ranks
        [0, 1] (call 0 on the group)``."""
        key, op = self.graph.key, self.op
        size = f" of {op.size_bytes:,} bytes" if op.size_bytes is not None else ""
        if key[0] == "p2p":
            _p2p, src, dst, tag, index = key
            what = (f"send{size} to rank {dst}" if self.rank == src
                    else f"receive{size} from rank {src}")
            what += f" (comm_tag {tag}, call {index} on the pair)"
        else:
            _coll, group, index = key
            ranks = repr(list(group))
            ranks = ranks if len(ranks) <= 60 else ranks[:57] + "..."
            what = (f"{op.op or 'a collective of unrecorded kind'}{size} over ranks {ranks} "
                    f"(call {index} on the group)")
        return f"rank {self.rank}'s node {self.node.id} ({self.node.name[:40]!r}): {what}"


def _peers(key: Any) -> tuple[int, ...]:
    return (key[1], key[2]) if key[0] == "p2p" else key[1]


def _disagree(first: Call, other: Call) -> str | None:
    """What two calls of one rendezvous disagree on (a kind or size one leaves unsaid
    is no disagreement: the replay takes the recorded duration then)."""
    a, b = first.op, other.op
    if a.op is not None and b.op is not None and a.op != b.op:
        return "kind"
    if a.size_bytes is not None and b.size_bytes is not None and a.size_bytes != b.size_bytes:
        return "size"
    return None


def _other_tag(key: Any, by_key: dict[Any, list[Call]], traced: set[int]) -> Call | None:
    """A call of the same pair under another tag that is missing its peer too."""
    for other_key, members in by_key.items():
        if (other_key[0] == "p2p" and other_key[1:3] == key[1:3] and other_key[3] != key[3]
                and {m.rank for m in members} != set(_peers(other_key)) & traced):
            return members[0]
    return None


def check_calls(calls: Iterable[Call], traced: set[int]) -> None:
    """Raise :class:`ParseError` naming the calls where two calls that meet disagree on
    kind or size, or where a traced peer never makes a call (module docstring)."""
    by_key: dict[Any, list[Call]] = {}
    for call in calls:
        by_key.setdefault(call.graph.key, []).append(call)
    for key, members in by_key.items():
        first = members[0]
        for other in members[1:]:
            what = _disagree(first, other)
            if what is not None:
                raise ParseError(f"{first.describe()} meets {other.describe()}: the calls "
                                 f"differ in {what}", source=other.source,
                                 key=f"node {other.node.id}",
                                 hint="each rank's k-th call on a group must be the same "
                                      "collective of the same size")
        missing = sorted(set(_peers(key)) & traced - {m.rank for m in members})
        if not missing:
            continue
        if key[0] == "p2p":
            partner = _other_tag(key, by_key, traced)
            if partner is not None:
                raise ParseError(f"{first.describe()} meets no call: {partner.describe()} "
                                 "differs in comm_tag", source=first.source,
                                 key=f"node {first.node.id}.comm_tag",
                                 hint="a send and its receive carry the same tag")
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise ParseError(f"{first.describe()} waits for rank(s) {shown}, whose traces never "
                         "make this call: on a cluster the job would hang here",
                         source=first.source, key=f"node {first.node.id}",
                         hint="the traces of one job, one per rank, each with every call")
