"""The rack-scale study: the best strategy per NVLink domain size (8, 36, 72 GPUs) for Llama
3.1 405B and a DeepSeek-V3-class MoE on GB200, found by ``distsim search`` at 1,152 GPUs and
weak-scaled to 4,608 and 8,064, with what sets each iteration's time.

    python docs/studies/rack_scale_domains.py [--time-limit 180] [--out DIR]

For each model and domain size it runs ``distsim search`` on the base scenario
(``rack-scale/*.yaml``) with ``cluster.nvlink_domain`` set, keeps the best strategy, then
runs that strategy with ``distsim run --json`` at 1,152, 4,608 and 8,064 GPUs (more
data-parallel replicas, the global batch with them).  It writes ``rack-scale.csv`` (one row
per model, domain and scale: strategy, iteration time, the critical path's split by kind,
the busiest link and its class) and prints the table of ``rack-scale-nvlink.md``.  Searches
stop starting simulations after ``--time-limit`` seconds (the best found is reported).
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

HERE = Path(__file__).resolve().parent
MODELS = {"llama3.1-405b": "rack-scale/llama3.1-405b-1152-gb200.yaml",
          "deepseek-v3": "rack-scale/deepseek-v3-1152-gb200.yaml"}
DOMAINS = (8, 36, 72)
BASE_GPUS, SCALES = 1152, (1152, 4608, 8064)
COLUMNS = ("model", "domain", "gpus", "strategy", "iteration_s", "compute_pct", "tp_pct",
           "ep_pct", "pp_pct", "dp_pct", "cp_pct", "bubble_pct", "busiest_link",
           "busiest_class")


def _distsim(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "distsim_gpu.scenarios", *args],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"distsim {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def best_strategy(model: str, domain: int, out: Path, time_limit: int) -> dict:
    """The search's best scenario (its best.yaml) for one model and domain size."""
    folder = out / f"search-{model}-{domain}"
    _distsim("search", str(HERE / MODELS[model]), "--top", "3", "--out", str(folder),
             "--workers", "2", "--time-limit", str(time_limit),
             "--set", f"cluster.nvlink_domain={domain}",
             "--set", f"cluster.nodes={BASE_GPUS // domain}")
    return yaml.safe_load((folder / "best.yaml").read_text())


def scaled(best: dict, domain: int, gpus: int) -> dict:
    """``best`` with ``gpus / 1,152`` times the data-parallel replicas and batch."""
    factor = gpus // BASE_GPUS
    scenario = json.loads(json.dumps(best))
    scenario["cluster"] = {k: v for k, v in scenario["cluster"].items() if k != "name"}
    scenario["cluster"]["nodes"] = gpus // domain
    scenario["parallelism"]["dp"] *= factor
    scenario["training"]["global_batch"] *= factor
    return scenario


def measure(scenario: dict, path: Path) -> dict:
    """One run's iteration time, critical path split and busiest link."""
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    report = json.loads(_distsim("run", str(path), "--json"))
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
    parser.add_argument("--time-limit", type=int, default=180)
    parser.add_argument("--out", default=str(HERE / "rack-scale"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in MODELS:
        for domain in DOMAINS:
            best = best_strategy(model, domain, out, args.time_limit)
            for gpus in SCALES:
                run = measure(scaled(best, domain, gpus), out / f"{model}-{domain}-{gpus}.yaml")
                rows.append({"model": model, "domain": domain, "gpus": gpus,
                             "strategy": describe(best["parallelism"]), **run})
                print(" | ".join(str(rows[-1][c]) for c in COLUMNS), flush=True)
    with open(out / "rack-scale.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
