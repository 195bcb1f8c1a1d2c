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


def _csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return buffer.getvalue()


RESULT_COLUMNS = (*STRATEGY_KEYS, "iteration_time_s", "samples_per_s", "mfu",
                  "peak_memory_bytes", "lower_bound_s", "estimate_s")


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
    header = ("#", "iteration", "samples/s", "MFU", "peak mem", "strategy")
    rows = [(str(i + 1), f"{r.iteration_time_s * 1e3:.2f} ms", f"{r.samples_per_s:.1f}",
             f"{r.mfu * 100:.1f} %", f"{r.peak_memory_bytes / _GIB:.1f} GiB",
             r.strategy.label()) for i, r in enumerate(result.top)]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    for cells in (header, *rows):
        lines.append("  ".join(c.rjust(w) if i < 5 else c
                               for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
    lines.append("")
    if result.baseline is not None and result.speedup is not None:
        lines.append(f"baseline ({result.baseline_kind}): {result.baseline.strategy.label()}: "
                     f"{result.baseline.iteration_time_s * 1e3:.2f} ms; best is "
                     f"{result.speedup:.2f}x faster")
    else:
        lines.append(f"baseline: {result.baseline_kind}")
    return "\n".join(lines) + "\n"
