"""Every profiler trace of the corpus replayed: docs/validation.md's "Every trace of the
corpus" table, as ``distsim validate trace FILE`` reports each with its default cluster.

    python validation/traces/corpus_table.py [--data DIR]

``DIR`` is ``shared/data/traces``.  Each row: the trace, the ranks it holds of its job's,
the cluster the replay chose (the box of the trace's GPU, as many nodes as the world size
needs), the steps averaged, the iteration (the slowest traced rank's ``ProfilerStep``)
measured and replayed, and the median |error| of the collectives' transfers with the
number of calls it covers.  Prints the Markdown table alone (tests/test_docs_tables.py
checks the page against it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

from distsim_gpu.scenarios.cli.main import main as distsim

HERE = Path(__file__).resolve().parent
#: (the name the table shows, the file under shared/data/traces).
TRACES = (
    ("param/…/dlrm_kineto.tar.gz", "param/et_replay/tests/inputs/dlrm_kineto.tar.gz"),
    *((f"HTA/…/{name}", f"HolisticTraceAnalysis/tests/data/{name}") for name in (
        "nccl_parser_config/nccl_data.json.gz",
        "negative_queue_length_values_check/rank0.json.gz",
        "trace_diff/control/control.json.gz",
        "trace_diff/test/test.json.gz",
        "trace_filter/sampled_rank-0.json.gz",
        "trace_filter/sampled_rank-1.json.gz",
        "df_index_resolver/df_index_resolver.json.gz")),
)
_CLUSTER = re.compile(r"^(?P<name>\S+) .*, (?P<nodes>\d+) node\(s\)$")


def report(path: Path) -> dict[str, Any]:
    """``distsim validate trace PATH --json -q``'s report."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = distsim(["validate", "trace", str(path), "--json", "-q"])
    if status != 0:
        raise SystemExit(f"distsim validate trace {path} failed ({status})")
    return json.loads(out.getvalue())


def row(name: str, data: dict[str, Any]) -> str:
    """One trace's line of the table."""
    found = _CLUSTER.match(data["cluster"])
    cluster = data["cluster"] if found is None else found["name"] + (
        "" if found["nodes"] == "1" else f" ×{found['nodes']}")
    it = data["iteration"]
    error = f"{it['error_pct']:+.2f} %".replace("-", "−")
    transfers = data["collective_transfer_error_pct"]
    calls = transfers.get("calls_simulated", 0)
    median = ("no sizes recorded" if not calls or transfers.get("median_abs") is None
              else f"{transfers['median_abs']:.0f} % ({calls})")
    return (f"| `{name}` | {len(data['ranks_traced'])} of {data['world_size']} | {cluster} | "
            f"{len(data['steps'])} | {1e3 * it['measured_s']:.2f} ms | "
            f"{1e3 * it['predicted_s']:.2f} ms | {error} | {median} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=HERE.parents[2] / "shared" / "data"
                        / "traces", help="the shared/data/traces folder")
    args = parser.parse_args(argv)
    print("| trace | ranks traced | cluster | steps | measured | predicted | error | "
          "transfers, median \\|error\\| (calls) |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name, relative in TRACES:
        print(row(name, report(args.data / relative)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
