"""``trace.json`` with one track per GPU and stream, as Perfetto shows it.

The iteration traces a *rank group* — the tensor-parallel GPUs of one pipeline stage of one
replica, which run the same kernels in lockstep — once, as one process.  A person looking
for ``n3.gpu5`` wants it by name: :func:`per_gpu_chrome_trace` writes each rank group's
spans once per GPU it stands for — its members and, where data-parallel replicas were
folded, its images' members, which ran the same events — with
:meth:`simcore.trace.Tracer.to_chrome_trace`'s ``expand``: GPUs in rank order, each with
its streams (compute, tp comm, pp send, dp comm, …) as threads; a pipeline send's ``to``
names the peer GPU of the same place in its group.  A GPU faster than its group's pace
(the run's ``paces``: a straggler's tensor-parallel peer) gets each compute span shortened
to its share and, right after, a ``wait for <straggler>`` span on its ``tp comm`` track
for the rest — the exposed communication its row of the per-GPU breakdown counts — so
each GPU's trace sums to its row.
The run metadata follows: ``otherData.distsim.groups`` names one group per GPU (with the
rank group it belongs to under ``rank_group``), so ``distsim trace summary`` and ``trace
costs`` read the file back per GPU as before (:mod:`measured.distsim_trace`).

Links are counter tracks, one per link that ever carried a byte (``links``), with the
busiest again under ``top links`` and the critical path as its own track.

Expanded, a trace holds every span once per GPU; past ``max_events`` spans it is written
per rank group, as the simulation traced it, with the reason in
``otherData.distsim.tracks`` and in the note the caller prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distsim_gpu.measured.distsim_trace import (
    COMPUTE_TRACK,
    WAIT_ARG,
    pace_setter,
    wait_name,
)
from distsim_gpu.scenarios.report.timelines import Timeline
from distsim_gpu.simcore.trace import Paced, Tracer
from distsim_gpu.workloads.iteration.simulator import GpuTimes
from distsim_gpu.workloads.strategy.dimensions import peer_group

__all__ = ["MAX_TRACE_EVENTS", "per_gpu_chrome_trace"]

_TP = peer_group("tp")  # a faster GPU waits for its straggler in a TP collective

#: Spans beyond which trace.json keeps one track per rank group (each span once): about
#: 1 GB of JSON, more than Perfetto's browser UI loads comfortably.
MAX_TRACE_EVENTS = 5_000_000


def per_gpu_chrome_trace(tracer: Tracer, timelines: Sequence[Timeline],
                         per_gpu: Sequence[GpuTimes], max_events: int = MAX_TRACE_EVENTS
                         ) -> tuple[dict[str, Any], str]:
    """The Chrome trace of ``tracer`` with a track per GPU and stream, and a note ("" when
    none): why it stayed per rank group.  ``timelines`` say which GPUs each traced rank
    group stands for — its own and, folded, its images' (:mod:`scenarios.report.timelines`);
    ``per_gpu`` each GPU's rank, stage and replica."""
    meta = tracer.metadata.get("distsim")
    groups = meta.get("groups") if isinstance(meta, dict) else None
    if not isinstance(groups, dict):
        return tracer.to_chrome_trace(), ""
    expand = {t.name: list(t.gpus) for t in timelines if t.name in groups}
    if not expand:
        return tracer.to_chrome_trace(), ""
    rank = {g.gpu: g.rank for g in per_gpu}
    expand = dict(sorted(expand.items(), key=lambda item: min(rank[g] for g in item[1])))
    spans = sum(len(expand.get(s.process, (0,))) for s in tracer.spans)
    shares, waits = _paces(groups)
    if shares:  # and a wait after each compute span of a faster GPU
        spans += sum(1 for s in tracer.spans if s.thread == COMPUTE_TRACK
                     and s.end_s > s.start_s for gpu in expand.get(s.process, ())
                     if gpu in shares)
    if spans > max_events:
        note = (f"trace.json has one track per rank group: one per GPU would hold {spans:,} "
                f"spans (over {max_events:,})")
        trace = tracer.to_chrome_trace()
        trace["otherData"]["distsim"] = {**meta, "tracks": "per rank group"}
        return trace, note
    trace = tracer.to_chrome_trace(expand=expand, paced=Paced(
        shares, waits, COMPUTE_TRACK, _TP.comm_kind) if shares else None)
    gpus = {g.gpu: g for g in per_gpu}
    per_gpu_groups = {  # a paced GPU's spans are its own: its slowdown is its own factor
        gpu: {"stage": gpus[gpu].stage, "replica": gpus[gpu].replica, "gpus": [gpu],
              "ranks": [gpus[gpu].rank], "rank_group": name,
              "slowdown": groups.get(name, {}).get("slowdown", 1.0) * shares.get(gpu, 1.0)}
        for name, members in expand.items() for gpu in members}
    trace["otherData"]["distsim"] = {**meta, "groups": per_gpu_groups, "tracks": "per GPU"}
    return trace, ""


def _paces(groups: dict[str, Any],
           ) -> tuple[dict[str, float], dict[str, tuple[str, dict[str, Any]]]]:
    """The GPUs faster than their group's pace: each one's share of the group's compute,
    and the name of its waits (the GPU it waits for)."""
    shares: dict[str, float] = {}
    waits: dict[str, tuple[str, dict[str, Any]]] = {}
    for group in groups.values():
        paces = group.get("paces") if isinstance(group, dict) else None
        if not paces:
            continue
        straggler = pace_setter(group["gpus"], paces)
        for gpu, share in zip(group["gpus"], paces):
            if share != 1.0:
                shares[gpu] = share
                waits[gpu] = (wait_name(straggler), {WAIT_ARG: straggler})
    return shares, waits
