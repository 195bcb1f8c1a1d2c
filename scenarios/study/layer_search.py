"""Per-layer strategy search (Galvatron's question): the best two-group mix of layers
against the best uniform strategy, under the scenario's GPU memory.

``distsim search SCENARIO --layer-groups --out DIR`` keeps the scenario's pipeline and GPUs
and tries, on every stage's ``G = GPUs/pp`` GPUs:

* uniform strategies: ``tp`` dividing the GPUs per node, the heads and ``G``, ``dp = G/tp``,
  each recompute mode;
* two groups: the first ``n`` layers at ``tp_a``, the rest at ``tp_b ≠ tp_a`` (``n`` in a
  quarter, a half and three quarters of the layers), each group's recompute mode
  (:mod:`workloads.strategy.layer_groups`; the rank group is the wider one).

Every candidate keeps the sequences each layer's sub-replica runs per micro-batch: the
scenario's ``micro_batch`` at the narrowest ``tp`` tried, ``micro_batch·tp/tp_min`` for a
rank group of ``tp`` GPUs.  Candidates that are invalid or exceed the GPU's memory (as the
simulator counts it) are skipped; the rest are simulated one by one in this process (no
bound prunes them: :mod:`workloads.cost.bounds` does not count groups).  ``DIR`` receives
``results.csv`` (every simulated candidate) and ``best.yaml`` (the fastest, resolved).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from distsim_gpu.scenarios.scenario import Scenario, run_scenario
from distsim_gpu.scenarios.study.search import gpus_per_node
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.workloads.cost.compute import activation_storage
from distsim_gpu.workloads.cost.memory import memory_of_strategy
from distsim_gpu.workloads.strategy.layer_groups import LayerGroup
from distsim_gpu.workloads.strategy.parallel import check_strategy

__all__ = ["LayerCandidate", "format_layer_search", "layer_search_dict", "search_layer_groups",
           "write_layer_search"]

# Megatron's modes; torchtitan's per-op ``op`` is not tried (a framework's policy, and
# every mode squares the two-group mixes).
RECOMPUTE = ("none", "selective", "full")
_GIB = 2**30


@dataclass(frozen=True, slots=True)
class LayerCandidate:
    """One simulated candidate: its groups (one group: uniform), time and peak memory."""

    groups: tuple[LayerGroup, ...]
    iteration_time_s: float
    peak_memory_bytes: float
    scenario: Scenario

    @property
    def uniform(self) -> bool:
        return len(self.groups) == 1

    @property
    def label(self) -> str:
        return " + ".join(f"{g.layers}×tp{g.tp} {g.recompute}" for g in self.groups)


def _tps(scenario: Scenario) -> list[int]:
    per_node = gpus_per_node(scenario)
    stage = scenario.num_gpus // scenario.parallel.pp
    model = scenario.model
    return [t for t in range(1, per_node + 1) if per_node % t == 0 and stage % t == 0
            and model.heads % t == 0 and (model.kv_heads % t == 0 or t % model.kv_heads == 0)]


def _group_sets(layers: int, tps: list[int]) -> list[tuple[LayerGroup, ...]]:
    sets = [(LayerGroup(layers, t, r),) for t, r in itertools.product(tps, RECOMPUTE)]
    splits = sorted({n for n in (layers // 4, layers // 2, 3 * layers // 4) if 0 < n < layers})
    for n, a, b in itertools.product(splits, tps, tps):
        if a != b:
            sets += [(LayerGroup(n, a, ra), LayerGroup(layers - n, b, rb))
                     for ra, rb in itertools.product(RECOMPUTE, repeat=2)]
    return sets


def _candidate(scenario: Scenario, groups: tuple[LayerGroup, ...], tp_min: int,
               ) -> Scenario | None:
    """``scenario`` with ``groups`` (None where invalid or out of memory)."""
    tp = max(g.tp for g in groups)
    stage = scenario.num_gpus // scenario.parallel.pp
    parallel = dataclasses.replace(scenario.parallel, tp=tp, dp=stage // tp,
                                   layer_groups=() if len(groups) == 1 else groups)
    training = dataclasses.replace(
        scenario.training, micro_batch=scenario.training.micro_batch * tp // tp_min,
        recompute=groups[0].recompute if len(groups) == 1 else "none")
    model = scenario.model
    try:
        microbatches = check_strategy(model, parallel, training,
                                      num_gpus=scenario.num_gpus)
    except ConfigError:
        return None
    storage = activation_storage(scenario.costs)
    peak = max(memory_of_strategy(model, parallel, training, seq_len=scenario.seq_len,
                                  microbatches=microbatches, stage=s, **storage).total_bytes
               for s in range(parallel.pp))
    if peak > scenario.gpu.memory_bytes:
        return None
    return scenario.with_run(parallel=parallel, training=training, microbatches=microbatches)


def search_layer_groups(scenario: Scenario) -> list[LayerCandidate]:
    """Every candidate that fits, simulated, fastest first (module docstring)."""
    tps = _tps(scenario)
    found = []
    for groups in _group_sets(scenario.model.layers, tps):
        candidate = _candidate(scenario, groups, tps[0])
        if candidate is None:
            continue
        report = run_scenario(candidate)
        found.append(LayerCandidate(groups, report.iteration_time_s,
                                    max(g.peak_memory_bytes for g in report.per_gpu),
                                    candidate))
    if not found:
        raise ConfigError("no uniform or two-group strategy fits in the GPU's "
                          f"{scenario.gpu.memory_bytes / _GIB:.1f} GiB", key="compute.gpu",
                          source=scenario.source, hint="a larger GPU, more GPUs or pp")
    return sorted(found, key=lambda c: c.iteration_time_s)


def format_layer_search(found: list[LayerCandidate]) -> str:
    """The best uniform and the best mixed candidate, and how they compare."""
    lines = []
    best = {kind: next((c for c in found if c.uniform == kind), None) for kind in (True, False)}
    for kind, name in ((True, "uniform"), (False, "mixed")):
        c = best[kind]
        lines.append(f"best {name:8} " + (f"{c.label}: {c.iteration_time_s * 1e3:.1f} ms, "
                                          f"{c.peak_memory_bytes / _GIB:.1f} GiB"
                                          if c else "none fits"))
    u, m = best[True], best[False]
    if u and m:
        lines.append(f"mixed / uniform  {u.iteration_time_s / m.iteration_time_s:.2f}x "
                     f"({len(found)} candidates simulated)")
    return "\n".join(lines) + "\n"


def layer_search_dict(found: list[LayerCandidate]) -> dict[str, Any]:
    """The search as one JSON-ready object: how many ran, the best uniform and the best
    mixed candidate (None where none fits) and how they compare."""
    best = {kind: next((c for c in found if c.uniform == kind), None) for kind in (True, False)}

    def entry(c: LayerCandidate | None) -> dict[str, Any] | None:
        if c is None:
            return None
        return {"groups": [{"layers": g.layers, "tp": g.tp, "recompute": g.recompute}
                           for g in c.groups], "label": c.label,
                "iteration_time_s": c.iteration_time_s,
                "peak_memory_bytes": c.peak_memory_bytes}

    u, m = best[True], best[False]
    return {"candidates": len(found), "best_uniform": entry(u), "best_mixed": entry(m),
            "mixed_speedup": (u.iteration_time_s / m.iteration_time_s if u and m else None)}


def write_layer_search(found: list[LayerCandidate], directory: str | Path) -> list[str]:
    """``results.csv`` and ``best.yaml`` into ``directory``; the names written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["groups", "uniform", "iteration_time_s", "peak_memory_bytes"])
    for c in found:
        writer.writerow([c.label, c.uniform, c.iteration_time_s, c.peak_memory_bytes])
    # (each file whole or not at all)
    atomic_write_text(out / "results.csv", buffer.getvalue())
    atomic_write_text(out / "best.yaml", yaml.safe_dump(found[0].scenario.resolved(),
                                                        sort_keys=False))
    return ["results.csv", "best.yaml"]
