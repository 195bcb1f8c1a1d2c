"""The tables of docs/studies/value-of-inter-node-bandwidth.md, from the sweeps' CSVs beside it.

The sweeps take minutes (their commands are on the page); this prints their results as the
page's Markdown tables, so a test can check that the page shows what the CSVs hold.  From
the repository root:

    python docs/studies/inter_node_tables.py default   # D-mod-K, NIC x oversubscription
    python docs/studies/inter_node_tables.py routing   # ECMP and adaptive routing
    python docs/studies/inter_node_tables.py seeds     # ECMP's hash seeds and queue pairs
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NICS = ("100 Gbps", "200 Gbps", "400 Gbps", "800 Gbps")
RATIOS = ("1", "2", "4")


def rows(name: str) -> list[dict[str, str]]:
    with open(HERE / name, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def time_of(table: list[dict[str, str]], **where: str) -> str:
    """The one row of ``table`` matching ``where`` (columns by their sweep key), as ``26.015 s``."""
    found = [r for r in table if all(r[f"cluster.{key.replace('__', '.')}"] == value
                                     for key, value in where.items())]
    assert len(found) == 1, (where, len(found))
    return f"{float(found[0]['iteration_time_s']):.3f} s"


def nic_label(nic: str) -> str:
    return nic.replace(" Gbps", " Gb/s") + (" (DGX A100)" if nic == "200 Gbps" else "")


def default_table() -> list[str]:
    table = rows("value-of-inter-node-bandwidth.csv")
    lines = ["| NIC | 1:1 | 2:1 | 4:1 |", "|---|---:|---:|---:|"]
    for nic in NICS:
        cells = [time_of(table, nic__bandwidth=nic, fabric__oversubscription=r) for r in RATIOS]
        lines.append(f"| {nic_label(nic)} | " + " | ".join(cells) + " |")
    return lines


def routing_table() -> list[str]:
    table = rows("value-of-inter-node-bandwidth-routing.csv")
    lines = ["| NIC | ECMP 1:1 | 2:1 | 4:1 | adaptive 1:1 | 2:1 | 4:1 |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for nic in NICS:
        cells = [time_of(table, fabric__routing=routing, nic__bandwidth=nic,
                         fabric__oversubscription=r)
                 for routing in ("ecmp", "adaptive") for r in RATIOS]
        lines.append(f"| {nic.replace(' Gbps', ' Gb/s')} | " + " | ".join(cells) + " |")
    return lines


def seeds_table() -> list[str]:
    table = rows("value-of-inter-node-bandwidth-ecmp-seeds.csv")
    lines = ["| queue pairs per connection | hash seed 0 | 1 | 2 | 3 |",
             "|---|---:|---:|---:|---:|"]
    for qps in ("1", "4"):
        cells = [time_of(table, fabric__qps_per_connection=qps, fabric__hash_seed=seed)
                 for seed in ("0", "1", "2", "3")]
        lines.append(f"| {qps} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=("default", "routing", "seeds"))
    args = parser.parse_args(argv)
    make = {"default": default_table, "routing": routing_table, "seeds": seeds_table}
    print("\n".join(make[args.table]()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
