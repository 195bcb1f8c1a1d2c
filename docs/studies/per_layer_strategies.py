"""Per-layer strategies (Galvatron) against the best uniform strategy under a memory budget.

One 8-GPU V100 PCIe server (tensor parallelism over PCIe is costly, as on Galvatron's
8-GPU PCIe servers), a BERT-Huge-32-shaped model (Galvatron's BERT-Huge-32: 32 layers,
hidden 1280, 16 heads, sequence 512), pp = 1, 64 sequences per iteration in 4
micro-batches, GPU memory capped at each budget.  Candidates:

* uniform: tp in {1, 2, 4, 8} (dp = 8/tp), recompute in {none, selective, full};
* mixed: two groups, the first ``n`` layers at tp_a and the rest at tp_b (n in 8, 16, 24;
  tp_a != tp_b in {1, 2, 4, 8}), each group's recompute none, selective or full.

A candidate whose simulated peak memory per GPU exceeds the budget is out.  Run from the
repository root:

    python docs/studies/per_layer_strategies.py [--budgets 8 10 12 16 24]

It prints a Markdown table (the one in docs/studies/per-layer-strategies.md).
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import DistsimError
from distsim_gpu.workloads.cost.compute import activation_storage
from distsim_gpu.workloads.cost.memory import memory_of_strategy

LAYERS, TPS, SPLITS = 32, (1, 2, 4, 8), (8, 16, 24)
RECOMPUTE = ("none", "selective", "full")
GIB = 2**30


def spec(groups: list[dict[str, Any]] | None, tp: int, recompute: str,
         budget_gib: float) -> dict[str, Any]:
    """The scenario of one candidate; ``tp`` is the rank group's (the widest group's)."""
    parallelism: dict[str, Any] = {"tp": tp, "dp": 8 // tp}
    if groups:
        parallelism["layer_groups"] = groups
    return {"name": "per-layer", "cluster": {"preset": "pcie-8gpu", "nodes": 1,
                                             "pcie": {"bandwidth": "15.75 GB/s"}},
            "model": {"name": "bert-huge-32", "layers": LAYERS, "hidden": 1280, "heads": 16,
                      "seq_len": 512, "vocab": 30522},
            "parallelism": parallelism,
            # micro_batch 2·tp: every layer's sub-replicas see 2 sequences, 4 micro-batches.
            "training": {"micro_batch": 2 * tp, "global_batch": 64, "recompute": recompute,
                         "precision": "fp16"},
            "compute": {"gpu": {"preset": "v100-32gb", "memory": f"{budget_gib} GiB"},
                        "costs": "roofline"}}


def candidates() -> list[tuple[str, list[dict[str, Any]] | None, int, str]]:
    """(label, groups, rank-group tp, training.recompute) of every candidate."""
    out: list[tuple[str, list[dict[str, Any]] | None, int, str]] = []
    for tp, rc in itertools.product(TPS, RECOMPUTE):
        out.append((f"uniform tp{tp} {rc}", None, tp, rc))
    for n, tp_a, tp_b in itertools.product(SPLITS, TPS, TPS):
        if tp_a == tp_b:
            continue
        for rc_a, rc_b in itertools.product(RECOMPUTE, repeat=2):
            groups = [{"layers": n, "tp": tp_a, "recompute": rc_a},
                      {"layers": LAYERS - n, "tp": tp_b, "recompute": rc_b}]
            out.append((f"{n}×tp{tp_a} {rc_a} + {LAYERS - n}×tp{tp_b} {rc_b}", groups,
                        max(tp_a, tp_b), "none"))
    return out


def peak_bytes(scenario: Any) -> float:
    """Bytes per GPU as the simulator counts them (pp = 1: one stage)."""
    return memory_of_strategy(scenario.model, scenario.parallel, scenario.training,
                              seq_len=scenario.seq_len, microbatches=4, stage=0,
                              **activation_storage(scenario.costs)).total_bytes


def best(budget_gib: float, times: dict[str, float]) -> dict[str, tuple[str, float, float]]:
    """The fastest uniform and mixed candidates that fit ``budget_gib``: label -> (kind,
    iteration s, peak GiB); ``times`` caches simulated iterations by label."""
    found: dict[str, tuple[str, float, float]] = {}
    for label, groups, tp, rc in candidates():
        try:
            scenario = scenario_from_mapping(spec(groups, tp, rc, budget_gib))
        except DistsimError:
            continue  # e.g. a micro-batch that does not split
        peak = peak_bytes(scenario)
        if peak > budget_gib * GIB:
            continue
        if label not in times:
            times[label] = run_scenario(scenario).iteration_time_s
        kind = "uniform" if groups is None else "mixed"
        if kind not in found or times[label] < found[kind][1]:
            found[kind] = (label, times[label], peak / GIB)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[8, 10, 12, 16, 24])
    args = parser.parse_args()
    times: dict[str, float] = {}
    print("| budget | best uniform | s | GiB | best mixed | s | GiB | mixed / uniform |")
    print("|---|---|---|---|---|---|---|---|")
    for budget in args.budgets:
        found = best(budget, times)
        u, m = found.get("uniform"), found.get("mixed")
        cells = [f"{budget:g} GiB"]
        for got in (u, m):
            cells += ([got[0], f"{got[1]:.3f}", f"{got[2]:.1f}"] if got else ["none fits", "", ""])
        speed = f"{u[1] / m[1]:.2f}×" if u and m else ""
        print("| " + " | ".join([*cells, speed]) + " |")


if __name__ == "__main__":
    main()
