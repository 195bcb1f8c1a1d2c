"""Every nccl-tests log of the shared corpus validates on the cluster docs/validation.md names
for it, and the Alps cluster description has the shape its comments state.

Each log is read, simulated size by size and compared (``validate_nccl_log``, what ``distsim
validate nccl`` runs).  Besides finishing without an error, a comparison must read the log
right: the bus bandwidth it derives from each measured time, with the bus factor of the
operation it compared (2(n-1)/n for all-reduce, (n-1)/n for all-gather), is the one the log
printed.  Alps' per-run CSVs are read by validation/alps/run_alps.py; the runs up to four
nodes are checked here, the larger ones in that script (docs/validation.md).
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.measured.nccl_log import NcclLog, parse_nccl_log
from distsim_gpu.scenarios.fit.validate_nccl import NcclValidation, validate_nccl_log
from distsim_gpu.topology import Topology, load_cluster

ALPS = Path(__file__).resolve().parents[3] / "validation" / "alps"

# log (under shared/data/nccl) -> cluster, nodes, --set overrides, --op, --run: as
# docs/validation.md runs each one.
CORPUS = {
    "oci_oke_a100_40gb_2node_roce_allreduce.txt": ("dgx-a100", 2, [], None, None),
    "gcp_a3mega_h100_2node_allreduce.txt": ("dgx-h100", 2, ["nic.bandwidth=200 Gbps"],
                                            None, None),
    "meta_gcm_testfixture_a100_80gb_1node_and_2node.txt#1": ("dgx-a100", 1, [], None, 1),
    "meta_gcm_testfixture_a100_80gb_1node_and_2node.txt#2": ("dgx-a100", 2, [], None, 2),
    "misc/dgxc_h100_single_node/allreduce_8xH100_sample.txt": ("dgx-h100", 1, [], None, None),
    "misc/gcp_a4_b200_roce_allgather_2nodes_16gpus.txt": ("gcp-a4", 2, [], "all_gather",
                                                          None),
    "alps_gh200/example_out_4nodes_16gpus.txt": (str(ALPS / "alps-gh200.yaml"), 4, [], None,
                                                 None),
}


@pytest.fixture(scope="module")
def run_alps() -> ModuleType:
    """validation/alps/run_alps.py, imported from its file (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("run_alps", ALPS / "run_alps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_alps"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _section(log: NcclLog, run: int | None) -> NcclLog:
    return log.sections[run - 1] if run is not None else log


def _check_read_right(report: NcclValidation, log: NcclLog) -> None:
    """Every row compared, finite, and the log's own bus bandwidth where it prints enough
    digits (>= 1 GB/s: nccl-tests rounds to 0.01 GB/s)."""
    assert len(report.rows) == len(log.rows)
    for compared, row in zip(report.rows, log.rows, strict=True):
        assert compared.size_bytes == row.size_bytes
        assert math.isfinite(compared.predicted_time_s) and compared.predicted_time_s > 0
        printed = statistics.mean(
            b for b in (row.out_of_place_busbw_bytes_per_s, row.in_place_busbw_bytes_per_s)
            if b is not None)
        if printed >= 1e9:
            # The mean of two times against the mean of two rates: equal to a few percent
            # where the halves differ; a wrong bus factor would be off by 2x.
            assert compared.measured_busbw_bytes_per_s == pytest.approx(printed, rel=0.1)
    assert report.median_abs_error_all_pct is not None


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_log_of_the_corpus_validates(name: str, nccl_logs: Path) -> None:
    cluster, nodes, overrides, op, run = CORPUS[name]
    log = parse_nccl_log(nccl_logs / name.split("#")[0])
    topology = load_cluster(cluster, nodes=nodes, overrides=overrides)
    report = validate_nccl_log(log, topology, op=op, run=run)
    assert report.num_ranks == len(topology.gpus)
    assert report.op == (op or "all_reduce")
    _check_read_right(report, _section(log, run))


def test_the_corpus_list_covers_every_log(nccl_logs: Path) -> None:
    # Every nccl-tests log file (not the TraceLens statistics, not Alps' per-run CSVs,
    # which run_alps.py reads) is in CORPUS: a new log must be given its cluster.
    logs = {str(p.relative_to(nccl_logs)) for p in nccl_logs.rglob("*.txt")}
    assert logs == {name.split("#")[0] for name in CORPUS}


# ----------------------------------------------------------------------------- Alps


@pytest.fixture(scope="module")
def alps113() -> Topology:
    return load_cluster(ALPS / "alps-gh200.yaml", nodes=113)


def _router(topo: Topology, nic: str) -> str:
    """The switch a NIC is cabled to."""
    (router,) = {link.dst for link in topo.links()
                 if link.src == nic and topo.device(link.dst).kind == "switch"}
    return router


def test_alps_cluster_is_built_as_its_comments_say(alps113: Topology) -> None:
    fabric = alps113.config["fabric"]
    assert fabric["kind"] == "dragonfly" and fabric["routing"] == "adaptive"
    assert fabric["technology"] == "ethernet"  # Slingshot: the quad-gh200 preset's
    assert (fabric["groups"], fabric["routers_per_group"], fabric["nics_per_router"]) == (
        24, 32, 14)
    assert alps113.config["preset"] == "quad-gh200" and len(alps113.gpus) == 4 * 113
    # A chassis of 14 nodes: node n's NIC i on switch blade i of its chassis, so nodes 0
    # and 13 share routers 0-3 and node 14 starts the next chassis; node 112, the 113th,
    # opens the second cabinet (group).
    assert [_router(alps113, f"n0.nic{i}") for i in range(4)] == [f"g0.r{i}" for i in range(4)]
    assert _router(alps113, "n13.nic2") == "g0.r2"
    assert _router(alps113, "n14.nic0") == "g0.r4"
    assert _router(alps113, "n111.nic3") == "g0.r31"
    assert _router(alps113, "n112.nic0") == "g1.r0"
    # 32 routers x 17 global ports over 23 peer groups: 23 cables of 200 Gb/s per pair.
    between = sum(link.bandwidth_bytes_per_s for link in alps113.links()
                  if link.src.startswith("g0.") and link.dst.startswith("g1."))
    assert between == pytest.approx(23 * 25e9)


def test_alps_runs_every_node_count(run_alps: ModuleType, shared_data: Path) -> None:
    runs = run_alps.find_runs(shared_data / "nccl" / "alps_gh200")
    for plugin in ("aws-ofi-1.13.0", "aws-ofi-1.9.2"):
        assert [r.nodes for r in runs if r.plugin == plugin] == [2**k for k in range(10)]
    assert all(r.ranks == 4 * r.nodes for r in runs)


def test_alps_csvs_read_as_the_summary_says(run_alps: ModuleType, shared_data: Path) -> None:
    data = shared_data / "nccl" / "alps_gh200"
    summary = {}
    for line in (data / "allreduce_summary_large_msgs.csv").read_text().splitlines()[1:]:
        plugin, _gpus, nodes, size, oop_us, _, ip_us, _ = line.split(",")
        summary[(plugin, int(nodes), int(size))] = (float(oop_us), float(ip_us))
    for run in run_alps.find_runs(data):
        rows = {row.size_bytes: row for row in run_alps.read_run(run).rows}
        assert len(rows) == 30 and min(rows) == 8 and max(rows) == 2**32
        for size in run_alps.SUMMARY_SIZES:
            oop_us, ip_us = summary[(run.plugin, run.nodes, size)]
            assert rows[size].out_of_place_time_s == pytest.approx(oop_us * 1e-6)
            assert rows[size].in_place_time_s == pytest.approx(ip_us * 1e-6)


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_alps_small_runs_validate(run_alps: ModuleType, shared_data: Path,
                                  nodes: int) -> None:
    (run,) = [r for r in run_alps.find_runs(shared_data / "nccl" / "alps_gh200")
              if r.nodes == nodes and r.plugin == "aws-ofi-1.13.0"]
    report = run_alps.validate_run(run, CommParams(algorithm="ring"))
    _check_read_right(report, run_alps.read_run(run))
    largest = report.rows[-1]
    # A ring never beats its narrowest hop: across nodes the node's 4 NICs (4 x 25 GB/s),
    # inside one node the 18 NVLinks of a GPU (18 x 25 GB/s).
    bound = 4 * 25e9 if nodes > 1 else 18 * 25e9
    assert largest.predicted_busbw_bytes_per_s <= bound


def test_run_alps_prints_its_tables(run_alps: ModuleType, shared_data: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert run_alps.main(["--data", str(shared_data / "nccl" / "alps_gh200"),
                          "--max-nodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 4 |" in out and "| 2 | 8 |" in out
    assert out.count("Bus bandwidth (GB/s) against node count") == 2
