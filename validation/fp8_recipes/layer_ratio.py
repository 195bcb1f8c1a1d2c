"""The per-layer FP8/BF16 time ratio of the roofline cost model at the shapes of NVIDIA's
DGX H100 tables (``shared/data/training/dgxc_benchmarking/dgxc_step_times_wide.csv``),
beside the measured FP8/BF16 step-time ratios of the same rows.

One transformer layer's forward + backward on one rank of an H100 SXM under the
``megatron-core`` stack, at each table's tp, sequence (split over cp: the layer at
``s/cp`` tokens plus ``cp − 1`` more core-attention blocks, as the ring runs them) and
micro-batch, sequence parallel on when tp > 1.  Only the layer's compute: communication,
pipeline bubbles and the optimizer are outside the ratio, so the measured step ratio is an
upper bound on what the layer ratio can reach where TP communication is exposed.

Run: ``python validation/fp8_recipes/layer_ratio.py`` (prints a table; deterministic).
"""

from __future__ import annotations

import sys

from distsim_gpu.workloads.cost.compute import STACKS, RooflineCosts
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import get_model

# (label, model preset, tp, cp, seq_len, micro_batch, measured FP8 s, measured BF16 s):
# rows of dgxc_step_times_wide.csv (release in the label), the same configuration in both
# precisions.
ROWS = (
    ("Llama 3.1 8B, 8 GPUs (v25.04)", "llama3-8b", 1, 2, 8192, 1, 9.33, 12.27),
    ("Llama 3.1 70B, 64 GPUs (v25.02)", "llama3-70b", 4, 2, 8192, 1, 10.46, 14.61),
    ("Llama 3.1 405B, 64 GPUs (v25.04)", "llama3.1-405b", 8, 2, 8192, 1, 6.32, 10.1),
    ("GPT-3 175B, 128 GPUs (v25.02)", "gpt3-175b", 4, 1, 2048, 1, 5.626, 8.309),
)


def layer_time_s(costs: RooflineCosts, model_name: str, tp: int, cp: int, seq_len: int,
                 micro_batch: int) -> float:
    """One layer's forward + backward seconds on one rank (module docstring)."""
    model = get_model(model_name)
    shard = LayerShard(micro_batch, seq_len // cp, tp, sequence_parallel=tp > 1)
    total = 0.0
    for pass_ in ("fwd", "bwd"):
        work = costs.layer_work(pass_, model, shard)
        total += costs.work_time_s(work)
        attention = sum(costs.kernel_time_s(k) for k in work.kernels
                        if k.base_name == "attention")
        total += (cp - 1) * attention
    return total


def ratios(recipe: str | None = None, stack: str = "megatron-core") -> list[tuple[str, float,
                                                                                  float]]:
    """(label, simulated FP8/BF16 layer ratio, measured FP8/BF16 step ratio) per row."""
    gpu = get_gpu("h100-sxm")
    base = STACKS[stack]
    fp8_stack = base.with_fp8_recipe(recipe) if recipe else base
    out = []
    for label, model, tp, cp, seq, mbs, fp8_s, bf16_s in ROWS:
        bf16 = layer_time_s(RooflineCosts(gpu, "bf16", stack=base), model, tp, cp, seq, mbs)
        fp8 = layer_time_s(RooflineCosts(gpu, "fp8", stack=fp8_stack), model, tp, cp, seq,
                           mbs)
        out.append((label, fp8 / bf16, fp8_s / bf16_s))
    return out


def main(argv: list[str]) -> None:
    recipes = argv or ["delayed", "current", "blockwise"]
    for recipe in recipes:
        print(f"recipe {recipe}")
        for label, simulated, measured in ratios(recipe):
            print(f"  {label:36s} simulated {simulated:.3f}  measured {measured:.3f}  "
                  f"({simulated / measured - 1:+.1%})")


if __name__ == "__main__":
    main(sys.argv[1:])
