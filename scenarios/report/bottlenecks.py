"""Bottlenecks of a simulated iteration: what set its length, and which links worked hardest.

Two views, computed for every run from what the simulation records anyway:

* the **critical path** (:attr:`workloads.iteration.records.IterationResult.critical_path`): the
  chain of compute, transfers and waits, walked back from the rank group that finished
  last, that covers ``[0, iteration time]``; summarised here as seconds and % of the
  iteration per kind (compute, each parallelism dimension's communication, bubble wait, data
  loading: :func:`~workloads.iteration.timeline.critical_path_kinds`) and its longest
  entries;
* the **links** (:meth:`simcore.network.FlowNetwork.link_stats`): per link the bytes it
  carried, the time it was busy and saturated, and its utilisation — bytes over capacity ×
  iteration time — with the bytes split by traffic class (tp / pp / dp / ep).  Every byte
  counts: tensor-parallel collectives folded into compute (timed by their closed form, not
  run as flows) are recorded on their links as the flows they stand for.

:func:`bottlenecks` returns both as one JSON-ready object (the report's ``bottlenecks``);
:func:`format_bottlenecks` the terminal lines; :func:`add_to_trace` the trace tracks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from distsim_gpu.simcore.trace import Counter, Tracer
from distsim_gpu.simcore.units import format_duration
from distsim_gpu.workloads.iteration.simulator import IterationResult, PathEntry
from distsim_gpu.workloads.iteration.timeline import critical_path_kinds

__all__ = [
    "CRITICAL_PATH_PROCESS",
    "TOP_LINKS_PROCESS",
    "add_to_trace",
    "bottlenecks",
    "critical_path_summary",
    "format_bottlenecks",
    "link_summary",
]

#: Trace process names of the critical-path track and of the top links' counters.
CRITICAL_PATH_PROCESS = "critical path"
TOP_LINKS_PROCESS = "top links"
# The flow network's counter tracks (workloads.iteration.tracing.record_link_counters).
_LINKS_PROCESS = "links"


def _percent(value: float, total: float) -> float:
    return value / total * 100 if total > 0 else 0.0


def critical_path_summary(entries: Sequence[PathEntry], iteration_time_s: float,
                          top: int = 10) -> dict[str, Any]:
    """Seconds and % of the iteration per kind on the critical path (a compute entry's
    closed-form TP collectives count as ``tp comm``), and its ``top`` longest entries."""
    seconds = dict.fromkeys(critical_path_kinds(), 0.0)
    for entry in entries:
        seconds[entry.kind] = (seconds.get(entry.kind, 0.0) + entry.duration_s
                               - entry.tp_comm_s)
        seconds["tp comm"] += entry.tp_comm_s
    return {
        "total_s": sum(e.duration_s for e in entries),
        "entries": len(entries),
        "by_kind": {kind: {"seconds": s, "percent": _percent(s, iteration_time_s)}
                    for kind, s in seconds.items()},
        "top_entries": _longest(entries, iteration_time_s, top),
    }


def _longest(entries: Sequence[PathEntry], iteration_time_s: float,
             top: int) -> list[dict[str, Any]]:
    """The ``top`` longest entries, each *repeat* once: the same op chain of the same group
    taking the same time (one per micro-batch, say) is one entry with ``count`` and every
    start in ``starts_s`` (``start_s``/``end_s``: the first).  Listing each repeat would
    fill the list with one line many times."""
    tolerance_s = 1e-9 * max(iteration_time_s, 1e-300)
    repeats: dict[tuple[str, str, str, int], list[PathEntry]] = {}
    for e in entries:
        key = (e.kind, e.label, e.group, round(e.duration_s / tolerance_s))
        repeats.setdefault(key, []).append(e)
    longest = sorted(repeats.values(), key=lambda same: same[0].duration_s, reverse=True)
    return [{
        "start_s": e.start_s, "end_s": e.end_s, "duration_s": e.duration_s,
        "kind": e.kind, "label": e.label, "group": e.group, "gpu": e.gpu,
        "tp_comm_s": e.tp_comm_s, "count": len(same),
        "starts_s": [x.start_s for x in same]} for same in longest[:top] for e in same[:1]]


def _link_name(link_id: Any) -> str:
    if isinstance(link_id, tuple) and len(link_id) == 2:
        return f"{link_id[0]}->{link_id[1]}"
    return str(link_id)


def link_summary(result: IterationResult, top: int = 10) -> dict[str, Any]:
    """The ``top`` links by utilisation (bytes / (capacity × iteration time)) and by
    saturated time, each with its kind, bytes, busy and saturated seconds and its bytes per
    traffic class (the flows' tags: tp, pp, dp, ep)."""
    network = result.simulation.network
    ids, capacity, carried, busy, saturated = network.link_stat_arrays()
    t = result.iteration_time_s
    with np.errstate(divide="ignore", invalid="ignore"):
        utilisation = np.where(np.isfinite(capacity) & (t > 0), carried / (capacity * t), 0.0)
    topo = result.topology

    def row(i: int) -> dict[str, Any]:
        link_id = ids[i]
        kind = None
        if topo is not None and isinstance(link_id, tuple) and len(link_id) == 2:
            try:
                kind = topo.link(*link_id).kind
            except Exception:
                kind = None
        return {"link": _link_name(link_id), "kind": kind, "bytes": float(carried[i]),
                "busy_s": float(busy[i]), "saturated_s": float(saturated[i]),
                "utilisation": float(utilisation[i]),
                "capacity_bytes_per_s": float(capacity[i]),
                "bytes_by_traffic": network.link_bytes_by_tag(link_id)}

    def best(values: np.ndarray) -> list[dict[str, Any]]:
        order = np.argsort(-values, kind="stable")[:top]
        return [row(int(i)) for i in order if values[i] > 0]

    return {"top_links_by_utilisation": best(utilisation),
            "top_links_by_saturation": best(saturated)}


def bottlenecks(result: IterationResult, top: int = 10) -> dict[str, Any]:
    """The report's ``bottlenecks``: ``critical_path`` (see :func:`critical_path_summary`)
    and ``top_links_by_utilisation`` / ``top_links_by_saturation`` (:func:`link_summary`)."""
    return {"critical_path": critical_path_summary(result.critical_path,
                                                   result.iteration_time_s, top),
            **link_summary(result, top)}


def add_to_trace(tracer: Tracer, entries: Sequence[PathEntry],
                 summary: dict[str, Any]) -> None:
    """Add the critical path as spans of a process ``critical path`` and copy the top
    links' utilisation counters into a process ``top links`` (once per tracer)."""
    if any(s.process == CRITICAL_PATH_PROCESS for s in tracer.spans[-1:]):
        return
    for e in entries:
        tracer.span(CRITICAL_PATH_PROCESS, "critical path", e.label, e.start_s, e.end_s,
                    kind=e.kind, group=e.group, gpu=e.gpu)
    names = [link["link"] for key in ("top_links_by_utilisation", "top_links_by_saturation")
             for link in summary.get(key, [])]
    wanted = set(names)
    tracer.counters.extend([Counter(TOP_LINKS_PROCESS, c.name, c.time_s, c.value)
                            for c in tracer.counters
                            if c.process == _LINKS_PROCESS and c.name in wanted])



def _traffic(link: dict[str, Any]) -> str:
    by = link.get("bytes_by_traffic") or {}
    total = sum(by.values())
    if not total:
        return ""
    parts = sorted(by.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{tag} {b / total * 100:.0f}%" for tag, b in parts)


def _starts(entry: dict[str, Any], shown: int = 2) -> str:
    """When an entry ran: "from 24.1 ms", or for a repeat "×8 from 24.1 ms, 59.2 ms, …"."""
    starts = entry.get("starts_s") or [entry["start_s"]]
    text = ", ".join(format_duration(s) for s in starts[:shown])
    if len(starts) > shown:
        text += ", …"
    return f"×{len(starts)} from {text}" if len(starts) > 1 else f"from {text}"


def format_link(link: dict[str, Any]) -> str:
    """One link in words: name, kind, traffic mix, utilisation, saturated time."""
    what = ", ".join(x for x in (link.get("kind") or "", _traffic(link)) if x)
    return (f"{link['link']}" + (f" ({what})" if what else "")
            + f": {link['utilisation'] * 100:.1f}% utilised, busy {format_duration(link['busy_s'])}"
            f", saturated {format_duration(link['saturated_s'])}")


def format_bottlenecks(summary: dict[str, Any], iteration_time_s: float,
                       entries: int = 3, links: int = 3) -> list[str]:
    """The terminal section: critical path by kind, its longest entries, busiest links."""
    path = summary.get("critical_path")
    if not path:
        return []
    kinds = [f"{kind} {v['percent']:.1f}%" for kind, v in path["by_kind"].items()
             if v["seconds"] > 1e-12 * max(iteration_time_s, 1e-300)]
    lines = ["Bottlenecks (critical path: the chain of ops and transfers that set the "
             "iteration time):",
             "  critical path  " + (" · ".join(kinds) or "empty")]
    for i, e in enumerate(path["top_entries"][:entries]):
        head = "  longest        " if i == 0 else "                 "
        lines.append(f"{head}- {format_duration(e['duration_s'])} {e['kind']} "
                     f"{_starts(e)}: {e['label']} ({e['group']})")
    for i, link in enumerate(summary.get("top_links_by_utilisation", [])[:links]):
        head = "  busiest links  " if i == 0 else "                 "
        lines.append(head + "- " + format_link(link))
    return lines
