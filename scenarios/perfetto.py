"""``trace.json`` with one track per GPU and stream, as Perfetto shows it.

The iteration traces a *rank group* — the tensor-parallel GPUs of one pipeline stage of one
replica, which run the same kernels in lockstep — once, as one process.  A person looking
for ``n3.gpu5`` wants it by name: :func:`per_gpu_chrome_trace` writes each rank group's
spans once per member GPU (:meth:`simcore.trace.Tracer.to_chrome_trace` with ``expand``),
GPUs in rank order, each with its streams (compute, tp comm, pp send, dp comm, …) as
threads; a pipeline send's ``to`` names the peer GPU of the same tensor-parallel index.
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

from typing import Any

from distsim_gpu.simcore.trace import Tracer

__all__ = ["MAX_TRACE_EVENTS", "per_gpu_chrome_trace"]

#: Spans beyond which trace.json keeps one track per rank group (each span once): about
#: 1 GB of JSON, more than Perfetto's browser UI loads comfortably.
MAX_TRACE_EVENTS = 5_000_000


def per_gpu_chrome_trace(tracer: Tracer, max_events: int = MAX_TRACE_EVENTS
                         ) -> tuple[dict[str, Any], str]:
    """The Chrome trace of ``tracer`` with a track per GPU and stream, and a note ("" when
    none): why it stayed per rank group."""
    meta = tracer.metadata.get("distsim")
    groups = meta.get("groups") if isinstance(meta, dict) else None
    if not isinstance(groups, dict) or not groups:
        return tracer.to_chrome_trace(), ""
    expand = {name: list(g["gpus"]) for name, g in sorted(
        groups.items(), key=lambda item: min(item[1]["ranks"]))}
    spans = sum(len(expand.get(s.process, (0,))) for s in tracer.spans)
    if spans > max_events:
        note = (f"trace.json has one track per rank group: one per GPU would hold {spans:,} "
                f"spans (over {max_events:,})")
        trace = tracer.to_chrome_trace()
        trace["otherData"]["distsim"] = {**meta, "tracks": "per rank group"}
        return trace, note
    trace = tracer.to_chrome_trace(expand=expand)
    per_gpu = {gpu: {"stage": g["stage"], "replica": g["replica"], "gpus": [gpu],
                     "ranks": [rank], "slowdown": g.get("slowdown", 1.0),
                     "rank_group": name}
               for name, g in groups.items() for gpu, rank in zip(g["gpus"], g["ranks"])}
    trace["otherData"]["distsim"] = {**meta, "groups": per_gpu, "tracks": "per GPU"}
    return trace, ""
