"""Plot the inter-node bandwidth study under each routing policy.

Reads the main sweep's ``results.csv`` (the fabric's default routing, D-mod-K) and the
routing sweep's (``cluster.fabric.routing`` as a grid key) and draws iteration time against
NIC bandwidth: one colour per oversubscription, one line style per routing policy.

    python docs/studies/plot_routing.py study/results.csv routing/results.csv out.png
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

STYLES = {"dmodk": "-", "adaptive": ":", "ecmp": "--"}
COLOURS = {"1": "tab:blue", "2": "tab:orange", "4": "tab:green"}


def read_lines(paths: list[Path]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(routing, oversubscription) -> sorted (NIC Gb/s, iteration time s) points."""
    lines: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for path in paths:
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row["status"] != "ok":
                    continue
                routing = row.get("cluster.fabric.routing") or "dmodk"
                nic_gbps = float(row["cluster.nic.bandwidth"].split()[0])
                key = (routing, row["cluster.fabric.oversubscription"])
                lines[key].append((nic_gbps, float(row["iteration_time_s"])))
    return {key: sorted(points) for key, points in lines.items()}


def plot(lines: dict[tuple[str, str], list[tuple[float, float]]], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for (routing, ratio), points in sorted(lines.items()):
        xs, ys = zip(*points)
        ax.plot(xs, ys, STYLES.get(routing, "-."), marker="o", color=COLOURS.get(ratio),
                label=f"{routing}, {ratio}:1")
    ax.set_xscale("log", base=2)
    ax.set_xticks([100, 200, 400, 800], ["100", "200", "400", "800"])
    ax.set_xlabel("NIC bandwidth (Gb/s)")
    ax.set_ylabel("iteration time (s)")
    ax.set_title("GPT-3 175B, 1024 A100, two-tier fat tree: routing x oversubscription")
    ax.grid(alpha=0.3)
    ax.legend(ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    *inputs, output = sys.argv[1:]
    plot(read_lines([Path(p) for p in inputs]), Path(output))
