"""Time intervals: the length a set of ``(start, end)`` spans covers, merged or intersected.

Busy time is the length of a union of spans, not their sum: kernels on several streams,
or collectives on several channels, overlap.  The measured-trace summary, the simulated
iteration's accounting and the replay all ask this, so it is answered once, here.
Intervals are ``(start_s, end_s)`` pairs of floats; an empty or reversed one covers nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Intervals", "intersection_length", "length", "paced_end", "union", "union_length"]

#: Sorted, disjoint ``(start, end)`` intervals, as :func:`union` returns them.
Intervals = list[tuple[float, float]]


def union(intervals: Iterable[tuple[float, float]]) -> Intervals:
    """Merge ``(start, end)`` intervals into sorted, disjoint ones (empty ones dropped)."""
    merged: Intervals = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def paced_end(start_s: float, end_s: float, share: float) -> float:
    """Where ``[start_s, end_s]`` ends for a copy that takes ``share`` of its time (one GPU
    of several recorded as one that ran faster and waited out the rest): every writer and
    reader of such a split computes it here, so that they agree to the last digit."""
    return start_s + (end_s - start_s) * share


def length(intervals: Intervals) -> float:
    """Total length of disjoint intervals."""
    return sum(end - start for start, end in intervals)


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Length covered by a set of intervals, in one sorted sweep (no merged list built)."""
    total = 0.0
    end = float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end or stop <= start:  # inside what is counted, or empty
            continue
        total += stop - max(start, end)
        end = stop
    return total


def intersection_length(a: Intervals, b: Intervals) -> float:
    """Length of the intersection of two sorted, disjoint interval lists."""
    total = 0.0
    i = j = 0
    while i < len(a) and j < len(b):
        low = max(a[i][0], b[j][0])
        high = min(a[i][1], b[j][1])
        if high > low:
            total += high - low
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
