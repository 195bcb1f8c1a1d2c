"""The nccl-tests twin: sizes, bus-bandwidth factors, the printed table, validation."""

from __future__ import annotations

import json

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.nccl_tests import bus_factor, format_table, run_benchmark, size_series
from distsim_gpu.measured.nccl_log import parse_nccl_log
from distsim_gpu.scenarios.fit.calibrate_nccl import calibrate_nccl
from distsim_gpu.scenarios.fit.validate_nccl import (
    format_validation,
    select_run,
    validate_nccl_log,
)
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster


def test_size_series_follows_nccl_tests_factor_steps():
    assert size_series(8, 128, 2) == [8, 16, 32, 64, 128]
    assert size_series(1 << 20, 1 << 30, 4) == [1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28,
                                                 1 << 30]
    assert size_series(100, 100, 1) == [100]


@pytest.mark.parametrize(("minimum", "maximum", "factor"), [(0, 8, 2), (16, 8, 2), (8, 64, 1)])
def test_size_series_rejects_impossible_ranges(minimum, maximum, factor):
    with pytest.raises(ConfigError):
        size_series(minimum, maximum, factor)


@pytest.mark.parametrize(("op", "n", "factor"), [
    ("all_reduce", 16, 2 * 15 / 16), ("all_gather", 8, 7 / 8), ("reduce_scatter", 4, 3 / 4),
    ("alltoall", 2, 1 / 2), ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("sendrecv", 8, 1.0)])
def test_bus_factors_are_nccl_tests_own(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_rows_carry_algbw_and_busbw_consistently(small_cluster):
    rows = run_benchmark(small_cluster, "all_gather", [2**20, 2**26])
    for row in rows:
        assert row.algbw_bytes_per_s == pytest.approx(row.size_bytes / row.time_s)
        assert row.busbw_bytes_per_s == pytest.approx(row.algbw_bytes_per_s * 15 / 16)
        assert row.size_bytes % (16 * 4) == 0  # whole float elements per rank


def test_printed_table_reads_back_with_the_log_parser(small_cluster, tmp_path):
    rows = run_benchmark(small_cluster, "all_reduce", size_series(8, 2**30, 8))
    path = tmp_path / "sim.txt"
    path.write_text(format_table(rows, title_lines=["simulated"]))
    log = parse_nccl_log(path)
    assert [r.size_bytes for r in log.rows] == [r.size_bytes for r in rows]
    for printed, original in zip(log.rows, rows, strict=True):
        assert printed.time_s == pytest.approx(original.time_s, rel=5e-3, abs=0.01e-6)
    average = sum(r.busbw_bytes_per_s for r in rows) / len(rows)
    assert log.avg_busbw_bytes_per_s == pytest.approx(average, rel=1e-3)


def test_validating_the_simulators_own_table_gives_zero_error(small_cluster, tmp_path):
    rows = run_benchmark(small_cluster, "all_reduce", size_series(2**26, 2**30, 2))
    path = tmp_path / "sim.txt"
    path.write_text(format_table(rows))
    report = validate_nccl_log(parse_nccl_log(path), small_cluster)
    assert report.median_abs_error_large_pct == pytest.approx(0.0, abs=0.05)
    assert report.median_abs_error_small_pct is None


ZERO_BYTES = "       0       0     float     sum      -1     0.00    0.00    0.00      0\n"


def test_validation_leaves_out_rows_of_zero_bytes_and_says_so(small_cluster, tmp_path):
    rows = run_benchmark(small_cluster, "all_reduce", size_series(2**26, 2**28, 2))
    path = tmp_path / "sim.txt"
    lines = format_table(rows).splitlines(keepends=True)
    first_row = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    path.write_text("".join([*lines[:first_row], ZERO_BYTES, *lines[first_row:]]))
    report = validate_nccl_log(parse_nccl_log(path), small_cluster)
    assert [r.size_bytes for r in report.rows] == [2**26, 2**27, 2**28]
    assert report.empty_row_lines == (first_row + 1,)
    assert (f"left out: 1 row(s) of 0 bytes (line(s) {first_row + 1})"
            in format_validation(report))
    path.write_text("".join([*lines[:first_row], ZERO_BYTES]))
    with pytest.raises(ConfigError, match="no rows of more than 0 bytes"):
        validate_nccl_log(parse_nccl_log(path), small_cluster)


def test_a_row_with_wrong_results_is_compared_with_a_note(small_cluster, tmp_path):
    """A row whose ``#wrong`` is not 0 (nccl-tests found corrupted results) is said in a
    note of validate and calibrate, with its size and line; it had passed in silence."""
    rows = run_benchmark(small_cluster, "all_reduce", size_series(2**20, 2**24, 2))
    lines = format_table(rows).splitlines(keepends=True)
    first_row = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    fields = lines[first_row + 1].rstrip("\n").rsplit(None, 1)
    lines[first_row + 1] = f"{fields[0]}     17\n"  # the 2 MiB row, in-place #wrong
    path = tmp_path / "sim.txt"
    path.write_text("".join(lines))
    log = parse_nccl_log(path)
    expected = f"nccl-tests found wrong results at 1 size(s), 2 MiB (line {first_row + 2})"
    report = validate_nccl_log(log, small_cluster)
    assert [r.size_bytes for r in report.rows] == [r.size_bytes for r in rows]
    assert [n.kind for n in report.notes if expected in n.message] == ["ignored"]
    assert expected in format_validation(report)
    fitted = calibrate_nccl(log, small_cluster, op="all_reduce")
    assert [n.kind for n in fitted.notes if expected in n.message] == ["ignored"]
    path.write_text(format_table(rows))
    assert not [n for n in validate_nccl_log(parse_nccl_log(path), small_cluster).notes
                if "#wrong" in n.message]


def test_validation_refuses_a_rank_count_mismatch(shared_data):
    log = parse_nccl_log(shared_data / "nccl" / "oci_oke_a100_40gb_2node_roce_allreduce.txt")
    with pytest.raises(ConfigError, match="16 ranks but the cluster has 8 GPUs"):
        validate_nccl_log(log, build_cluster({"preset": "dgx-a100", "nodes": 1}))


def test_multi_run_log_picks_the_run_matching_the_cluster(shared_data):
    log = parse_nccl_log(shared_data / "nccl" /
                         "meta_gcm_testfixture_a100_80gb_1node_and_2node.txt")
    assert select_run(log, 8).num_ranks == 8
    assert select_run(log, 16).num_ranks == 16
    assert select_run(log, 16, run=1).num_ranks == 8
    with pytest.raises(ConfigError, match="run 1: 8 ranks"):
        select_run(log, 24)
    with pytest.raises(ConfigError, match="no run 3"):
        select_run(log, 8, run=3)


def test_oci_log_bandwidth_bound_error_is_reported_per_size(shared_data):
    log = parse_nccl_log(shared_data / "nccl" / "oci_oke_a100_40gb_2node_roce_allreduce.txt")
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2})
    report = validate_nccl_log(log, topo)
    assert len(report.rows) == 31
    for row in report.rows:
        expected = 100 * (row.predicted_time_s - row.measured_time_s) / row.measured_time_s
        assert row.error_pct == pytest.approx(expected)
    # Not a fit: a guard that the defaults stay physically plausible on a real log.
    assert report.median_abs_error_large_pct < 25
    assert report.median_abs_error_small_pct < 25


def test_forced_ring_on_oci_log_stays_under_the_nic_ceiling(shared_data):
    log = parse_nccl_log(shared_data / "nccl" / "oci_oke_a100_40gb_2node_roce_allreduce.txt")
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2})
    report = validate_nccl_log(log, topo, params=CommParams(algorithm="ring"))
    ceiling = 8 * 25e9  # eight 200 Gb/s NICs
    assert max(r.predicted_busbw_bytes_per_s for r in report.rows) < ceiling


@pytest.mark.parametrize(("call", "text"), [
    (lambda topo: bus_factor("allreduce", 8),
     "op: unknown nccl-tests operation 'allreduce' (did you mean 'all_reduce'?"),
    (lambda topo: run_benchmark(topo, "all_reduc", [8]),
     "op: unknown nccl-tests operation 'all_reduc' (did you mean 'all_reduce'?"),
    (lambda topo: run_benchmark(topo, "all_reduce", [8], dtype="bf16"),
     "dtype: unknown data type 'bf16' (did you mean 'bfloat16'?"),
])
def test_unknown_operation_or_data_type_names_the_argument(small_cluster, call, text):
    with pytest.raises(ConfigError) as info:
        call(small_cluster)
    assert str(info.value).startswith(text)


def test_validating_with_an_unknown_op_names_the_flag(small_cluster, tmp_path):
    rows = run_benchmark(small_cluster, "all_reduce", [2**26])
    path = tmp_path / "sim.txt"
    path.write_text(format_table(rows))
    with pytest.raises(ConfigError) as info:
        validate_nccl_log(parse_nccl_log(path), small_cluster, op="all-reduce")
    assert str(info.value).startswith("--op: unknown nccl-tests operation 'all-reduce' "
                                      "(did you mean 'all_reduce'?")


def test_the_header_prints_the_bounds_as_given(capsys):
    """nccl-tests prints -e as given: -e 1G -f 8 stops at 512M, but maxBytes is 1G."""
    from distsim_gpu.scenarios.cli.main import main

    assert main(["nccl-tests", "--cluster", "switch", "-b", "8M", "-e", "1G", "-f", "8"]) == 0
    out = capsys.readouterr().out
    assert "minBytes 8388608 maxBytes 1073741824 step: 8(factor)" in out
    sizes = [int(line.split()[0]) for line in out.splitlines()
             if line.strip() and line.split()[0].isdigit()]
    assert sizes == [8 * 2**20, 64 * 2**20, 512 * 2**20]


def test_one_gpu_says_why_its_rows_read_zero(capsys):
    """One rank moves nothing between GPUs: the 0.00 us rows come with their reason."""
    from distsim_gpu.scenarios.cli.main import main

    args = ["nccl-tests", "--cluster", "switch", "--set", "gpus=1", "-b", "8", "-e", "64"]
    assert main(args) == 0
    assert "note: unmodelled: one GPU: the collective moves no bytes" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert [note["kind"] for note in notes] == ["unmodelled"]
    assert main(["nccl-tests", "--cluster", "switch", "--set", "gpus=2", "-b", "8",
                 "-e", "8"]) == 0
    assert "one GPU" not in capsys.readouterr().out
