"""The rack-scale study: the best strategy per NVLink domain size (8, 36, 72 GPUs) for Llama
3.1 405B and a DeepSeek-V3-class MoE on GB200, found by the strategy search at 1,152 GPUs,
weak-scaled to 4,608 and 8,064 where the run stays affordable, with what sets each
iteration's time.

    python docs/studies/rack_scale_domains.py [--time-limit 60] [--run-limit 240] [--out DIR]

For each model and domain size it searches the base scenario (``rack-scale/*.yaml``) with
``cluster.nvlink_domain`` set, over a space restricted to what NVIDIA's recipes vary
(:data:`SPACE`), keeps the best strategy, then runs it with ``distsim run --json`` at 1,152
GPUs and, for 72-GPU domains, at 4,608 and 8,064 (more data-parallel replicas, the global
batch with them: there the replicas fold and a run takes a minute; at 8 and 36 they do not,
and one 1,152-GPU run already takes minutes).  A run past ``--run-limit`` seconds is recorded
as such.  Rows go to ``rack-scale.csv`` as they finish (strategy, iteration time, the
critical path's split by kind, the busiest link and its class).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from distsim_gpu.scenarios.scenario import load_scenario
from distsim_gpu.scenarios.study.search import search_strategies

HERE = Path(__file__).resolve().parent
MODELS = {"llama3.1-405b": "rack-scale/llama3.1-405b-1152-gb200.yaml",
          "deepseek-v3": "rack-scale/deepseek-v3-1152-gb200.yaml"}
DOMAINS = (8, 36, 72)
BASE_GPUS, SCALES = 1152, (1152, 4608, 8064)
#: What the search varies (NVIDIA's GB200 recipes: micro-batch 1, the distributed optimizer,
#: sequence parallelism, interleaved or plain 1F1B; tp, cp, ep, pp, dp and order free).
SPACE = {"micro_batch": [1], "zero": [1], "sequence_parallel": [True],
         "recompute": ["none", "selective"], "schedule": ["1f1b", "interleaved"],
         "interleave": [2, 4], "order": ["tp-dp-pp", "dp-tp-pp"]}
COLUMNS = ("model", "domain", "gpus", "strategy", "searched_s", "iteration_s", "compute_pct",
           "tp_pct",
           "ep_pct", "pp_pct", "dp_pct", "cp_pct", "bubble_pct", "busiest_link",
           "busiest_class")


def _distsim(*args: str, timeout_s: float | None = None) -> str | None:
    """``distsim`` with ``args``; None when it runs past ``timeout_s``."""
    try:
        done = subprocess.run([sys.executable, "-m", "distsim_gpu.scenarios", *args],
                              capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        raise SystemExit(f"distsim {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def best_strategy(model: str, domain: int, out: Path, time_limit: int) -> tuple[dict, float]:
    """The search's best scenario (its best.yaml) for one model and domain size, and the
    iteration time the search simulated for it."""
    folder = out / f"search-{model}-{domain}"
    scenario = load_scenario(HERE / MODELS[model], overrides=[
        ("cluster.nvlink_domain", domain), ("cluster.nodes", BASE_GPUS // domain)])
    result = search_strategies(scenario, top=3, workers=2, out_dir=folder, space=SPACE,
                               time_limit_s=time_limit)
    return (yaml.safe_load((folder / "best.yaml").read_text()),
            round(result.results[0].iteration_time_s, 4))


def scaled(best: dict, domain: int, gpus: int) -> dict:
    """``best`` with ``gpus / 1,152`` times the data-parallel replicas and batch."""
    factor = gpus // BASE_GPUS
    scenario = json.loads(json.dumps(best))
    scenario["cluster"] = {k: v for k, v in scenario["cluster"].items() if k != "name"}
    scenario["cluster"]["nic"].pop("count", None)  # the preset's, one per GPU
    scenario["cluster"]["nodes"] = gpus // domain
    scenario["parallelism"]["dp"] *= factor
    scenario["training"]["global_batch"] *= factor
    return scenario


def measure(scenario: dict, path: Path, run_limit: int) -> dict:
    """One run's iteration time, critical path split and busiest link (empty past the
    limit)."""
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    text = _distsim("run", str(path), "--json", timeout_s=run_limit)
    if text is None:
        return {"iteration_s": f"> {run_limit} s of host time, not run"}
    report = json.loads(text)
    kinds = report["bottlenecks"]["critical_path"]["by_kind"]
    links = report["bottlenecks"].get("top_links_by_saturation") or [{}]
    pct = {k: round(v["percent"], 1) for k, v in kinds.items()}
    return {"iteration_s": round(report["iteration_time_s"], 4),
            "compute_pct": pct.get("compute", 0.0), "tp_pct": pct.get("tp comm", 0.0),
            "ep_pct": pct.get("ep comm", 0.0), "pp_pct": pct.get("pp transfer", 0.0),
            "dp_pct": pct.get("dp comm", 0.0), "cp_pct": pct.get("cp comm", 0.0),
            "bubble_pct": pct.get("bubble wait", 0.0),
            "busiest_link": links[0].get("link", ""), "busiest_class": links[0].get("kind", "")}


def describe(parallelism: dict) -> str:
    keys = ("tp", "cp", "ep", "pp", "dp")
    text = " ".join(f"{k}{parallelism[k]}" for k in keys if parallelism.get(k, 1) > 1)
    if parallelism.get("interleave", 1) > 1:
        text += f" vp{parallelism['interleave']}"
    if parallelism.get("order", "tp-dp-pp") != "tp-dp-pp":
        text += f" order {parallelism['order']}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--time-limit", type=int, default=60)
    parser.add_argument("--run-limit", type=int, default=240)
    parser.add_argument("--out", default=str(HERE / "rack-scale"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "rack-scale.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for model in MODELS:
            for domain in DOMAINS:
                best, searched_s = best_strategy(model, domain, out, args.time_limit)
                for gpus in SCALES if domain == 72 else SCALES[:1]:
                    scenario = scaled(best, domain, gpus)
                    run = measure(scenario, out / f"{model}-{domain}-{gpus}.yaml",
                                  args.run_limit)
                    row = {"model": model, "domain": domain, "gpus": gpus,
                           "strategy": describe(scenario["parallelism"]),
                           "searched_s": searched_s if gpus == BASE_GPUS else "", **run}
                    writer.writerow(row)
                    handle.flush()
                    print(" | ".join(str(row.get(c, "")) for c in COLUMNS), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
