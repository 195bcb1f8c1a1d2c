"""The memory / time frontier of per-operator sharding (OSDP) for GPT-3 sizes on one DGX A100.

For each model: all-replicated (plain DP), every greedy OSDP plan (operators sharded largest
first, one operator type more per step — the order that adds the fewest gathers per byte
of state saved), the all-sharded plan (ZeRO-3) and, for the budget, the fastest plan whose
peak memory per GPU fits (memory per GPU: the simulated GPUs' peak).  From the repository
root:

    python docs/studies/operator_sharding_frontier.py [--nodes 1] [--global-batch 64]
        [--seq-len 2048] [--budget-gib 40] [--exhaustive] [--best-only] [--out table.csv]

It prints a Markdown table (the one in docs/studies/operator-sharding.md).
"""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.operator_sharding import SHARDABLE_OPERATORS, operator_params

# GPT-3 shapes (Brown et al. 2020, Table 2.1): layers, hidden, heads (13B: the
# table's 5140 does not split into 40 heads of 128; Megatron uses 5120).
MODELS = {"1.3B": (24, 2048, 16), "2.7B": (32, 2560, 32), "6.7B": (32, 4096, 32),
          "13B": (40, 5120, 40)}
GIB = 2**30


def spec(name: str, plan: dict[str, Any], global_batch: int, nodes: int,
         seq_len: int = 2048) -> dict[str, Any]:
    layers, hidden, heads = MODELS[name]
    return {"name": f"gpt3-{name}", "cluster": {"preset": "dgx-a100", "nodes": nodes},
            "model": {"name": f"gpt3-{name}", "layers": layers, "hidden": hidden,
                      "heads": heads, "seq_len": seq_len, "vocab": 50257},
            "parallelism": {"dp": 8 * nodes, "operator_sharding": plan},
            "training": {"micro_batch": 1, "global_batch": global_batch,
                         "recompute": "full", "precision": "bf16"},
            "compute": {"gpu": "a100-80gb", "costs": "roofline"}}


def greedy_plans(name: str) -> list[tuple[str, dict[str, Any]]]:
    """Replicated, then operators sharded largest first, then all sharded (ZeRO-3)."""
    layers, hidden, heads = MODELS[name]
    model = model_from_mapping({"name": "m", "layers": layers, "hidden": hidden,
                                "heads": heads, "seq_len": 2048, "vocab": 50257})
    params = operator_params(model, 1)
    order = sorted(params, key=lambda op: -params[op])
    plans = [("replicated (DP)", {"default": "replicated"})]
    for n in range(1, len(order)):
        plans.append((f"OSDP: {'+'.join(order[:n])}", {"sharded": order[:n]}))
    plans.append(("sharded (ZeRO-3)", {"default": "sharded"}))
    plans.append(("ZeRO-3, fc1 and fc2 split 4",
                  {"default": "sharded", "split": {"mlp_fc1": 4, "mlp_fc2": 4}}))
    return plans


def every_plan() -> list[tuple[str, dict[str, Any]]]:
    """All 64 subsets of the operator types sharded (OSDP's search space for one layer
    type, which its depth-first search explores)."""
    ops = SHARDABLE_OPERATORS
    plans = []
    for mask in range(2 ** len(ops)):
        chosen = [op for i, op in enumerate(ops) if mask >> i & 1]
        plans.append((f"OSDP: {'+'.join(chosen) or 'none'}", {"sharded": chosen}))
    return plans


def frontier(global_batch: int, nodes: int, seq_len: int,
             exhaustive: bool = False) -> list[dict[str, Any]]:
    rows = []
    for name in MODELS:
        for label, plan in (every_plan() if exhaustive else greedy_plans(name)):
            report = run_scenario(scenario_from_mapping(
                spec(name, plan, global_batch, nodes, seq_len)), allow_oom=True)
            peak = max(gpu.peak_memory_bytes for gpu in report.per_gpu)
            rows.append({"model": name, "plan": label, "memory_gib": peak / GIB,
                         "iteration_s": report.iteration_time_s,
                         "tokens_per_s": report.tokens_per_s})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-gib", type=float, default=40.0)
    parser.add_argument("--global-batch", type=int, default=64,
                        help="sequences per iteration (micro-batch 1)")
    parser.add_argument("--nodes", type=int, default=1, help="DGX A100 nodes (dp = 8·nodes)")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--exhaustive", action="store_true",
                        help="every subset of operators instead of the greedy order")
    parser.add_argument("--out", help="also write the rows as CSV")
    parser.add_argument("--best-only", action="store_true",
                        help="print only each model's best plan within the budget")
    args = parser.parse_args(argv)
    rows = frontier(args.global_batch, args.nodes, args.seq_len, args.exhaustive)
    if not args.best_only:
        print("| model | plan | memory/GPU GiB | iteration s | tokens/s | fits "
              f"{args.budget_gib:g} GiB |")
        print("|---|---|---:|---:|---:|:-:|")
        for r in rows:
            fits = "yes" if r["memory_gib"] <= args.budget_gib else ""
            print(f"| {r['model']} | {r['plan']} | {r['memory_gib']:.1f} | "
                  f"{r['iteration_s']:.3f} | {r['tokens_per_s']:,.0f} | {fits} |")
        print()
    for name in MODELS:
        mine = [r for r in rows if r["model"] == name]
        zero3 = next(r for r in mine if r["plan"] in (
            "sharded (ZeRO-3)", "OSDP: " + "+".join(SHARDABLE_OPERATORS)))
        fit = [r for r in mine if r["memory_gib"] <= args.budget_gib]
        if fit:
            best = max(fit, key=lambda r: r["tokens_per_s"])
            print(f"{name}: best within {args.budget_gib:g} GiB: {best['plan']} "
                  f"{best['tokens_per_s'] / zero3['tokens_per_s']:.2f}x ZeRO-3")
    if args.out:
        with open(args.out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
