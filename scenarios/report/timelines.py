"""What each GPU did over the iteration, in the few rows a person can read.

A :class:`Timeline` is one *schedule*: the main stream of one simulated rank group — the
contiguous segments :class:`~distsim_gpu.workloads.iteration.timeline.RankGroup` records anyway
(compute, exposed tp / pp / dp / ep communication, bubble waits), traced or not — and the
intervals when one of its collectives was in flight, with every GPU that ran it: the
group's tensor-parallel members and, when data-parallel replicas were folded, its images'.

Drawing thousands of GPUs as thousands of rows shows nothing a person can see, so
:func:`schedule_rows` picks the rows: one per GPU for small clusters, else one per group
of GPUs whose times agree (:func:`scenarios.report.group_gpus`), labelled with the GPUs it
stands for.  For the same reason a row is drawn at the resolution it is seen at:
:func:`fine_segments` splits a fused run of ops into its compute and its closed-form
tensor-parallel collectives, and :func:`bin_segments` gives each pixel-wide bin the kind
that took most of it, so that kinds alternating faster than a pixel do not draw over each
other; :func:`merge_segments` joins the neighbouring intervals of one lane.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from distsim_gpu.measured.distsim_trace import pace_setter, wait_name
from distsim_gpu.simcore.intervals import paced_end
from distsim_gpu.workloads.iteration.ops import Collective, Fused
from distsim_gpu.workloads.iteration.simulator import IterationResult

__all__ = ["MAX_GPU_ROWS", "Row", "Segment", "Timeline", "bin_segments", "compress_names",
           "fine_segments", "merge_segments", "schedule_rows", "timelines_of"]

#: Up to this many GPUs, a timeline draws one row per GPU; beyond, one per distinct
#: schedule (a person cannot read more rows than this in one figure).
MAX_GPU_ROWS = 32

Segment = tuple[float, float, str, str]  # start_s, end_s, kind, label


@dataclass(frozen=True, slots=True)
class Timeline:
    """One simulated rank group's schedule: ``segments`` of its main stream (contiguous
    from 0), ``collectives`` the intervals with a collective of it in flight, ``gpus``
    every GPU that ran it (its own, then its folded images')."""

    name: str
    stage: int
    gpus: tuple[str, ...]
    segments: tuple[Segment, ...]
    collectives: tuple[tuple[float, float], ...]
    # What each segment ran: a Fused op (compute with closed-form TP collectives inside,
    # see fine_segments) or None.  The ops are the streams' own objects, shared, not copies.
    fused: tuple[Fused | None, ...] = ()
    # The GPUs faster than the group's pace (a straggler's TP peers): (GPU, its share of
    # each compute span, the GPU it waits for), as the per-GPU breakdown splits them.
    paces: tuple[tuple[str, float, str], ...] = ()


def _label(info: Any) -> str:
    return str(getattr(info, "label", info))


def timelines_of(result: IterationResult) -> tuple[Timeline, ...]:
    """One :class:`Timeline` per simulated rank group of ``result``."""
    out = []
    for group, images in result.schedules:
        gpus = tuple(g for image in images for g in image.gpus)
        path = [entry for entry in group.path if entry[1] > entry[0]]
        segments = tuple((start, end, kind, _label(info))
                         for start, end, kind, info, _dep in path)
        fused = tuple(info if isinstance(info, Fused) else None for *_, info, _dep in path)
        out.append(Timeline(group.name, group.stage, gpus, segments,
                            tuple(sorted(group.comm_intervals)), fused, _paces(images)))
    return tuple(out)


def _paces(images: Any) -> tuple[tuple[str, float, str], ...]:
    """Each faster member of ``images`` (rank groups) with its share and its straggler."""
    out = []
    for image in images:
        if image.paced:
            straggler = pace_setter(image.gpus, image.paces)
            out += [(gpu, share, straggler) for gpu, share in zip(image.gpus, image.paces)
                    if share != 1.0]
    return tuple(out)


def fine_segments(timeline: Timeline, gpu: str | None = None) -> list[Segment]:
    """The timeline's segments with each Fused one split into its steps: compute, and the
    tensor-parallel collectives timed by their closed form inside it (``tp comm``), each
    as long as it ran (compute stretched by the group's slowdown, as the run did), so the
    picture shows the exposed TP time the per-GPU breakdown counts.  For ``gpu``, a
    member faster than the group's pace (:attr:`Timeline.paces`): each compute segment
    shortened to its share, then its wait for the straggler (``tp comm``), as its row of
    the breakdown counts them."""
    out = _split_fused(timeline)
    pace = next((p for p in timeline.paces if p[0] == gpu), None)
    if pace is None:
        return out
    _gpu, share, straggler = pace
    paced: list[Segment] = []
    for start, end, kind, label in out:
        if kind != "compute":
            paced.append((start, end, kind, label))
            continue
        mid = paced_end(start, end, share)
        paced += [(start, mid, kind, label), (mid, end, "tp comm", wait_name(straggler))]
    return paced


def _split_fused(timeline: Timeline) -> list[Segment]:
    out: list[Segment] = []
    fused = timeline.fused or (None,) * len(timeline.segments)
    for (start, end, kind, label), op in zip(timeline.segments, fused):
        if op is None or not op.comm_s or len(op.steps) != len(op.durations_s):
            out.append((start, end, kind, label))
            continue
        scale = (end - start - op.comm_s) / op.compute_s if op.compute_s > 0 else 1.0
        cursor = start
        for step, duration in zip(op.steps, op.durations_s):
            is_comm = isinstance(step, Collective)
            length = duration if is_comm else duration * scale
            if length > 0:
                out.append((cursor, cursor + length, "tp comm" if is_comm else kind,
                            step.label))
            cursor += length
    return out


def merge_segments(segments: Sequence[Segment], resolution_s: float) -> list[Segment]:
    """Join each segment to the previous one of its kind when the gap between them is at
    most ``resolution_s``; a joined segment's label names its first and last parts."""
    merged: list[list[Any]] = []
    last_of_kind: dict[str, list[Any]] = {}
    for start, end, kind, label in sorted(segments):
        previous = last_of_kind.get(kind)
        if previous is not None and start - previous[1] <= resolution_s:
            previous[1] = max(previous[1], end)
            previous[4] = label
            previous[5] += 1
            continue
        item = [start, end, kind, label, label, 1]
        merged.append(item)
        last_of_kind[kind] = item
    return [(s, e, k, first if n == 1 else f"{first} … {last} ({n} ops)")
            for s, e, k, first, last, n in merged]


def bin_segments(segments: Sequence[Segment], end_s: float, bins: int) -> list[Segment]:
    """What a row ``bins`` pixels wide can show of non-overlapping ``segments`` over
    ``[0, end_s]``: each bin takes the kind that filled most of it (none when segments
    fill less than half of it), and runs of bins of one kind become one segment, labelled
    by the segments of that kind it covers (``first … last (n ops)``).  Kinds that
    alternate faster than a bin are shown by the one that took the time, not drawn over
    each other."""
    if end_s <= 0 or bins <= 0 or not segments:
        return []
    width = end_s / bins
    fill = np.zeros((bins, 0))
    kinds: dict[str, int] = {}
    ordered = sorted(segments)
    for start, end, kind, _ in ordered:
        if kind not in kinds:
            kinds[kind] = len(kinds)
            fill = np.hstack([fill, np.zeros((bins, 1))])
        first, last = int(start / width), min(int(end / width), bins - 1)
        column = fill[:, kinds[kind]]
        if first == last:
            column[first] += end - start
            continue
        column[first] += (first + 1) * width - start
        column[first + 1:last] += width
        column[last] += end - last * width
    names = list(kinds)
    best = fill.argmax(axis=1)
    shown = fill.max(axis=1) >= 0.5 * width
    starts = [seg[0] for seg in ordered]
    ends = [seg[1] for seg in ordered]
    out: list[Segment] = []
    i = 0
    while i < bins:
        j = i + 1
        while j < bins and shown[j] == shown[i] and best[j] == best[i]:
            j += 1
        if shown[i]:
            start, end = i * width, min(j * width, end_s)
            # The segments overlapping the run (sorted and disjoint: by bisection).
            near = ordered[bisect.bisect_right(ends, start):bisect.bisect_left(starts, end)]
            out.append(_run(near, names[best[i]], start, end))
        i = j
    return out


def _run(near: Sequence[Segment], kind: str, start: float, end: float) -> Segment:
    """One drawn run: ``kind`` over ``[start, end]``, labelled by what of that kind it
    covers."""
    labels = [label for _, _, k, label in near if k == kind]
    if len(labels) <= 1:
        return (start, end, kind, labels[0] if labels else kind)
    return (start, end, kind, f"{labels[0]} … {labels[-1]} ({len(labels)} ops)")


@dataclass(frozen=True, slots=True)
class Row:
    """One row of a drawn timeline: its label, the GPUs it stands for and their
    schedule."""

    label: str
    gpus: tuple[str, ...]
    timeline: Timeline


def compress_names(names: Sequence[str], shown: int = 6) -> str:
    """``n0.gpu0, n0.gpu1, … (16 GPUs)``: the first names and the count."""
    if len(names) <= shown:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f", … ({len(names)} GPUs)"


def schedule_rows(timelines: Sequence[Timeline], gpu_groups: Sequence[Any],
                  gpu_order: Sequence[str], max_rows: int = MAX_GPU_ROWS) -> list[Row]:
    """The rows to draw: one per GPU (in ``gpu_order``, every GPU of the cluster) when
    there are at most ``max_rows``, else one per group of ``gpu_groups`` (objects with
    ``stage`` and ``gpus``, as :func:`scenarios.report.group_gpus` makes), each drawn with
    the schedule of its first GPU.  A GPU no timeline ran is left out (there is none)."""
    by_gpu = {gpu: t for t in timelines for gpu in t.gpus}
    if len(gpu_order) <= max_rows:
        return [Row(gpu, (gpu,), by_gpu[gpu]) for gpu in gpu_order if gpu in by_gpu]
    rows = []
    for i, grp in enumerate(gpu_groups):
        timeline = by_gpu.get(grp.gpus[0])
        if timeline is not None:
            count = f"{len(grp.gpus)} GPU" + ("s" if len(grp.gpus) > 1 else "")
            rows.append(Row(f"group {i + 1}: stage {grp.stage}, {count}", tuple(grp.gpus),
                            timeline))
    return rows
