"""A log's setting against its cluster: its run, its collective, its rank count."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives.nccl_tests import format_table, run_benchmark
from distsim_gpu.measured.nccl_log import parse_nccl_log
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.fit.nccl_log_setting import log_setting, ops_the_rows_allow
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall",
       "sendrecv")


def _table(cluster, op: str, sizes=(2**20, 2**22)) -> str:
    """distsim's own nccl-tests table of ``op`` (it names no collective)."""
    return format_table(run_benchmark(cluster, op, list(sizes)))


@pytest.mark.parametrize("op", OPS)
def test_the_rows_of_each_collective_allow_it(small_cluster, op):
    """Counts a rank's share for all-gather, reduce-scatter, all-to-all; a reduction name
    for the reducing three; a root for broadcast and reduce — as nccl-tests prints them.
    A reduction of ``none`` rules nothing out (a log without the column reads so)."""
    log = parse_nccl_log(_table(small_cluster, op))
    allowed = ops_the_rows_allow(log.rows, 16)
    split = {"all_gather", "reduce_scatter", "alltoall"}
    expected = {"all_reduce": {"all_reduce"}, "reduce": {"reduce"},
                "broadcast": {"broadcast", "reduce"}, "sendrecv": {"sendrecv", "all_reduce"},
                "reduce_scatter": {"reduce_scatter"}, "all_gather": split, "alltoall": split}
    assert set(allowed) == expected[op]


def test_a_log_that_names_no_collective_is_read_by_its_rows(small_cluster):
    setting = log_setting(parse_nccl_log(_table(small_cluster, "reduce_scatter")),
                          small_cluster)
    assert setting.op == "reduce_scatter"
    assert [n.key for n in setting.notes] == ["--op"]
    assert "read as reduce_scatter" in setting.notes[0].message


def test_rows_that_fit_several_collectives_ask_for_op(small_cluster):
    log = parse_nccl_log(_table(small_cluster, "all_gather"))
    with pytest.raises(ConfigError,
                       match="rows fit all_gather or reduce_scatter or alltoall") as info:
        log_setting(log, small_cluster)
    assert "--op" in info.value.hint
    assert log_setting(log, small_cluster, op="all_gather").notes == ()


def test_an_op_the_rows_rule_out_is_taken_with_a_note(small_cluster):
    log = parse_nccl_log(_table(small_cluster, "all_reduce"))
    setting = log_setting(log, small_cluster, op="alltoall")
    assert setting.op == "alltoall"
    assert "read as all_reduce" in setting.notes[0].message


def test_a_rank_count_the_cluster_lacks_is_refused_with_the_nodes_that_fit(shared_data,
                                                                          capsys):
    path = shared_data / "nccl" / "oci_oke_a100_40gb_2node_roce_allreduce.txt"
    one_node = build_cluster({"preset": "dgx-a100", "nodes": 1})
    with pytest.raises(ConfigError, match="16 ranks but the cluster has 8 GPUs") as info:
        log_setting(parse_nccl_log(path), one_node)
    assert info.value.hint == "run with --nodes 2, the cluster of 16 GPUs"
    # calibrate nccl checks it too (it fitted the 16-rank log to 8 GPUs)
    assert main(["calibrate", "nccl", str(path), "--cluster", "dgx-a100", "-q"]) != 0
    assert "16 ranks but the cluster has 8 GPUs" in capsys.readouterr().err


def test_a_run_picked_from_several_is_said(shared_data):
    path = shared_data / "nccl" / "meta_gcm_testfixture_a100_80gb_1node_and_2node.txt"
    setting = log_setting(parse_nccl_log(path),
                          build_cluster({"preset": "dgx-a100", "nodes": 2}))
    assert setting.log.num_ranks == 16
    assert any("run 2 is the one on 16 ranks" in n.message for n in setting.notes)


def test_a_run_number_past_the_logs_runs_is_refused(small_cluster, shared_data):
    one = parse_nccl_log(_table(small_cluster, "all_reduce"))
    with pytest.raises(ConfigError, match="holds 1 run") as info:
        log_setting(one, small_cluster, run=2)
    assert info.value.hint == "drop --run: the log's one run is compared"
    two = parse_nccl_log(shared_data / "nccl" /
                         "meta_gcm_testfixture_a100_80gb_1node_and_2node.txt")
    with pytest.raises(ConfigError, match="holds 2 run") as info:
        log_setting(two, small_cluster, run=3)
    assert info.value.hint == "choose 1 to 2"


def test_a_log_cut_short_is_said_and_a_whole_one_is_not(shared_data, capsys):
    """validate nccl on a log that stops before its header's maxBytes compares what is
    there and says, in a note, that the rest of the sweep is missing: its medians had read
    as the whole sweep's. The whole log (and calibrate's notes, from the same setting)
    says nothing of the kind."""
    text = (shared_data / "nccl" / "oci_oke_a100_40gb_2node_roce_allreduce.txt").read_text(
        encoding="utf-8")
    two_nodes = build_cluster({"preset": "dgx-a100", "nodes": 2})
    whole = log_setting(parse_nccl_log(text), two_nodes)
    assert [n.kind for n in whole.notes] == ["defaulted"]
    part = log_setting(parse_nccl_log("\n".join(text.splitlines()[:40]) + "\n"), two_nodes)
    (note,) = [n for n in part.notes if n.kind == "headline"]
    assert "stops at 4 KiB" in note.message and "maxBytes 8 GiB" in note.message


def test_validate_nccl_prints_the_cut_short_note(shared_data, tmp_path, capsys):
    text = (shared_data / "nccl" / "oci_oke_a100_40gb_2node_roce_allreduce.txt").read_text(
        encoding="utf-8")
    path = tmp_path / "part.log"
    path.write_text("\n".join(text.splitlines()[:40]) + "\n", encoding="utf-8")
    assert main(["validate", "nccl", str(path), "--cluster", "dgx-a100", "--nodes", "2",
                 "-q"]) == 0
    assert "note: headline: the log's table stops at 4 KiB" in capsys.readouterr().out
