"""A search's output: ``results.csv``, ``pruned.csv`` and ``best.yaml`` in a folder, and
the terminal summary."""

from __future__ import annotations

import csv
import io
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from distsim_gpu.scenarios.study.search_results import SearchResult
from distsim_gpu.scenarios.study.search_space import STRATEGY_KEYS
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.fileio import atomic_write_text

__all__ = ["PRUNED_COLUMNS", "RESULT_COLUMNS", "format_search", "write_search_output"]

_GIB = 2.0**30
# A best that needs more than this share of its GPU's memory gets a headroom warning.
_TIGHT = 0.95


def _csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return buffer.getvalue()


RESULT_COLUMNS = (*STRATEGY_KEYS, "iteration_time_s", "samples_per_s", "mfu",
                  "peak_memory_bytes", "lower_bound_s", "estimate_s", "notes")


PRUNED_COLUMNS = (*STRATEGY_KEYS, "reason", "detail", "peak_memory_bytes", "lower_bound_s")


def write_search_output(result: SearchResult, directory: str | os.PathLike[str],
                        ) -> tuple[str, ...]:
    """Write ``results.csv``, ``pruned.csv`` and (when anything ran) ``best.yaml`` into
    ``directory`` (created if needed), each file atomically; returns the names written."""
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{target} exists and is not a directory", key="--out")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create {target}: {error.strerror}", key="--out") from None
    files = ["results.csv", "pruned.csv"]
    atomic_write_text(target / "results.csv",
                      _csv([r.row() for r in result.results], RESULT_COLUMNS))
    atomic_write_text(target / "pruned.csv",
                      _csv([p.row() for p in result.pruned], PRUNED_COLUMNS))
    if result.best_config is not None:
        atomic_write_text(target / "best.yaml",
                          yaml.safe_dump(result.best_config, sort_keys=False))
        files.append("best.yaml")
    else:
        # A best.yaml left by an earlier search of this folder would pass for this one's.
        (target / "best.yaml").unlink(missing_ok=True)
    return tuple(files)


def _commonest_failure(result: SearchResult) -> str:
    """``; N of the M that failed: DETAIL`` for the most frequent failure, so that a
    search every candidate of which fails for one reason says it ('' without failures)."""
    details = Counter(p.detail for p in result.pruned if p.reason == "error")
    if not details:
        return ""
    detail, count = details.most_common(1)[0]
    return f"; {count} of the {result.pruned_counts['error']} that failed: {detail}"


def format_search(result: SearchResult) -> str:
    """The terminal summary: counts, the top K table and the speed-up over the baseline."""
    counts = result.pruned_counts
    lines = [
        f"distsim search: {result.name} on {result.num_gpus} GPUs, global batch "
        f"{result.global_batch}",
        f"enumerated {result.enumerated}; pruned {sum(counts.values())} (invalid "
        f"{counts['invalid']}, out of memory {counts['memory']}, bound {counts['bound']}"
        + (f", time limit {counts['time limit']}" if counts["time limit"] else "")
        + (f", failed {counts['error']}" if counts["error"] else "")
        + f"); simulated {result.simulated}; {result.wall_time_s:.1f} s",
    ]
    if result.invalid_reasons:
        lines.append("invalid by key: " + ", ".join(
            f"{key} {n}" for key, n in result.invalid_reasons.items()))
    lines.append("")
    if not result.results:
        lines.append("no strategy could be simulated" + _commonest_failure(result))
        return "\n".join(lines) + "\n"
    best_s = result.results[0].iteration_time_s
    header = ("#", "iteration", "vs #1", "samples/s", "MFU", "peak mem", "strategy")
    rows = [(str(i + 1), f"{r.iteration_time_s * 1e3:.2f} ms",
             f"+{(r.iteration_time_s / best_s - 1) * 100:.2f} %" if i else "",
             f"{r.samples_per_s:.1f}", f"{r.mfu * 100:.1f} %",
             f"{r.peak_memory_bytes / _GIB:.1f} GiB", r.strategy.label())
            for i, r in enumerate(result.top)]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    for cells in (header, *rows):
        lines.append("  ".join(c.rjust(w) if i < 6 else c
                               for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
    lines += ["", *_best_lines(result)]
    if result.baseline is not None and result.speedup is not None:
        lines.append(f"baseline ({result.baseline_kind}): {result.baseline.strategy.label()}: "
                     f"{result.baseline.iteration_time_s * 1e3:.2f} ms; best is "
                     f"{result.speedup:.2f}x faster")
    else:
        lines.append(f"baseline: {result.baseline_kind}")
    return "\n".join(lines) + "\n"


def _best_lines(result: SearchResult) -> list[str]:
    """How to run the best (the scenario's keys it changes, as ``--set`` options) and the
    notes its run gave; then a blank line."""
    lines: list[str] = []
    changed = result.best_overrides or {}
    sets = [f"--set {key}={_yaml_scalar(value)}" for key, value in changed.items()
            if value is not None]
    if sets:
        lines.append("best as overrides of the scenario: " + " ".join(sets))
    dropped = [key for key, value in changed.items() if value is None]
    if dropped:
        lines.append("  and leave out " + ", ".join(dropped))
    best = result.results[0] if result.results else None
    capacity = result.gpu_memory_bytes
    if best is not None and capacity and best.peak_memory_bytes > _TIGHT * capacity:
        lines.append(
            f"the best needs {best.peak_memory_bytes / _GIB:.1f} of the GPU's "
            f"{capacity / _GIB:.1f} GiB, and the memory model counts no allocator "
            "fragmentation, CUDA context or NCCL buffers: to keep room for them, search "
            "again with --set compute.gpu.memory=<usable> (e.g. "
            f"{capacity * 0.9 / _GIB:.0f}GiB)")
    notes = best.notes if best is not None else ()
    if notes:
        lines.append("notes of the best's run (assumptions that move the answer):")
        lines += [f"  note: {note}" for note in notes]
    return [*lines, ""] if lines else []


def _yaml_scalar(value: Any) -> str:
    """``value`` as ``--set`` reads it (YAML): true/false, numbers and words as such."""
    return yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()
