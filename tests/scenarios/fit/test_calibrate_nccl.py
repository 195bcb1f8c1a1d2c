"""Calibration against an nccl-tests log: recovery of known parameters, the real OCI
log, and the command line (the optimiser itself: test_fitting.py)."""

from __future__ import annotations

import importlib
import json

import pytest
import yaml
from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.nccl_tests import format_table, run_benchmark, size_series
from distsim_gpu.measured.nccl_log import parse_nccl_log
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.fit.calibrate_nccl import apply_calibration, calibrate_nccl
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster


def test_known_parameters_are_recovered_from_a_simulated_log(small_cluster, tmp_path):
    truth = apply_calibration(CommParams(), {"network": 0.6, "nvlink": 0.7, "pcie": 0.9},
                              2.0)
    rows = run_benchmark(small_cluster, "all_reduce", size_series(2**20, 2**31, 2),
                         params=truth)
    path = tmp_path / "measured.txt"
    path.write_text(format_table(rows))
    result = calibrate_nccl(parse_nccl_log(path), small_cluster, op="all_reduce")
    assert result.median_error_after_pct < 1.0
    assert result.median_error_after_pct < result.median_error_before_pct
    # The NICs bound these rings and trees, so their efficiency is what the log pins down.
    assert result.link_efficiency["network"] == pytest.approx(0.6, rel=0.03)


def test_oci_log_fits_within_five_percent_and_reports_cross_validation(shared_data):
    log = parse_nccl_log(shared_data / "nccl" / "oci_oke_a100_40gb_2node_roce_allreduce.txt")
    topology = build_cluster({"preset": "dgx-a100", "nodes": 2})
    result = calibrate_nccl(log, topology, op="all_reduce")
    assert result.median_error_after_pct < 5.0
    assert result.median_error_after_pct <= result.median_error_before_pct
    assert 0 < result.cross_validation_error_pct < 15.0
    for value in result.link_efficiency.values():
        assert 0.2 <= value <= 1.0
    assert 0.1 <= result.latency_scale <= 20


def test_a_parameter_the_fit_leaves_at_its_bound_is_said(small_cluster, tmp_path):
    """Latencies 60x the defaults: the scale stops at its bound of 20, and says so."""
    truth = apply_calibration(CommParams(), {}, 60.0)
    rows = run_benchmark(small_cluster, "all_reduce", size_series(2**10, 2**24, 4),
                         params=truth)
    path = tmp_path / "slow.txt"
    path.write_text(format_table(rows))
    result = calibrate_nccl(parse_nccl_log(path), small_cluster, op="all_reduce",
                            min_bytes=2**10)
    assert result.latency_scale == pytest.approx(20.0, rel=1e-3)
    assert any(n.message.startswith("latency scale 20.000 is at its bound (0.1 to 20)")
               for n in result.notes)
    clean = calibrate_nccl(parse_nccl_log(path), small_cluster, op="all_reduce",
                           base=apply_calibration(CommParams(), {}, 60.0), min_bytes=2**10)
    assert not [n for n in clean.fit_notes() if "bound" in n.message]


def test_too_few_sizes_is_a_clear_error(small_cluster, tmp_path):
    rows = run_benchmark(small_cluster, "all_reduce", [2**10, 2**12])
    path = tmp_path / "small.txt"
    path.write_text(format_table(rows))
    with pytest.raises(ConfigError, match="a fit needs two or more"):
        calibrate_nccl(parse_nccl_log(path), small_cluster, op="all_reduce")


def test_a_row_of_zero_bytes_is_left_out_of_the_fit_with_a_note(small_cluster, tmp_path):
    rows = run_benchmark(small_cluster, "all_reduce", size_series(2**20, 2**24, 2))
    path = tmp_path / "measured.txt"
    zero = "           0             0     float     sum      -1     0.00    0.00    0.00      0\n"
    lines = format_table(rows).splitlines(keepends=True)
    first_row = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    path.write_text("".join([*lines[:first_row], zero, *lines[first_row:]]))
    result = calibrate_nccl(parse_nccl_log(path), small_cluster, op="all_reduce")
    assert sum(band.sizes for band in result.bands) == len(rows)
    assert [n.kind for n in result.notes if "0 bytes" in n.message] == ["ignored"]


def test_cli_writes_overrides_that_nccl_tests_reads_back(capsys, shared_data, tmp_path):
    log = shared_data / "nccl" / "oci_oke_a100_40gb_2node_roce_allreduce.txt"
    out = tmp_path / "comm.yaml"
    status = main(["calibrate", "nccl", str(log), "--cluster", "dgx-a100", "--nodes", "2",
                   "-o", str(out), "--json"])
    assert status == 0
    fitted = json.loads(capsys.readouterr().out)
    written = yaml.safe_load(out.read_text())
    assert written["communication"]["link_efficiency"] == pytest.approx(
        fitted["link_efficiency"])
    status = main(["nccl-tests", "--cluster", "dgx-a100", "--nodes", "2", "-b", "1G",
                   "-e", "1G", "--algo", "ring", "--json", "--comm", str(out)])
    assert status == 0
    comm = json.loads(capsys.readouterr().out)["comm"]
    assert comm["link_efficiency"]["network"] == pytest.approx(
        fitted["link_efficiency"]["network"])


def test_comm_file_without_a_communication_section_is_refused(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("link_efficiency: {network: 0.5}\n")
    status = main(["nccl-tests", "--cluster", "dgx-a100", "--comm", str(bad)])
    assert status == 2
    assert "no 'communication' mapping" in capsys.readouterr().err
    # A wrong key in the file is the file's, not a --set's.
    bad.write_text("communication:\n  link_efficency: {network: 0.5}\n")
    assert main(["nccl-tests", "--cluster", "dgx-a100", "--comm", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: communication.link_efficency: unknown key" in err and "--set" not in err


def test_a_log_that_repeats_its_sizes_simulates_each_size_once(small_cluster, tmp_path,
                                                               monkeypatch):
    # A long log repeats its size sweep run after run: each evaluation of the fit must
    # cost one simulation per distinct size, not one per row.
    sizes = size_series(2**20, 2**26, 2)
    rows = run_benchmark(small_cluster, "all_reduce", sizes)
    repeated = tmp_path / "repeated.txt"
    repeated.write_text(format_table(rows * 40))
    from distsim_gpu.collectives import nccl_tests
    module = importlib.import_module("distsim_gpu.scenarios.fit.calibrate_nccl")

    simulated, calls = [], []
    real_collective, real_benchmark = nccl_tests.Communicator.collective, module.run_benchmark

    def collective(self, *args, **kwargs):
        simulated.append(args[2])
        return real_collective(self, *args, **kwargs)

    def benchmark(*args, **kwargs):
        calls.append(len(args[2]))
        return real_benchmark(*args, **kwargs)

    monkeypatch.setattr(nccl_tests.Communicator, "collective", collective)
    monkeypatch.setattr(module, "run_benchmark", benchmark)
    calibrate_nccl(parse_nccl_log(repeated), small_cluster, op="all_reduce")
    assert max(calls) == 40 * len(sizes)  # the fit's rows: every repeat, weighed as logged
    assert len(simulated) <= len(calls) * len(sizes)  # ... simulated once per size
    again = run_benchmark(small_cluster, "all_reduce", [2**21, 2**20, 2**21])
    # (sizes run one after another on one clock: equal up to the clock's rounding)
    assert [r.time_s for r in again] == pytest.approx(
        [rows[1].time_s, rows[0].time_s, rows[1].time_s], rel=1e-12)
    assert again[0] is again[2]


def test_every_size_band_is_judged_and_a_worse_one_is_a_note(capsys, shared_data):
    """The OCI log: the fit on sizes >= 1 MiB helps them and worsens the small ones
    (5.4 -> 7.3 %); the output says so, per band, and in a note."""
    log = shared_data / "nccl" / "oci_oke_a100_40gb_2node_roce_allreduce.txt"
    assert main(["calibrate", "nccl", str(log), "--cluster", "dgx-a100", "--nodes", "2",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    bands = {band["band"]: band for band in data["bands"]}
    assert list(bands) == ["< 64 KiB", "64 KiB - 1 MiB", ">= 1 MiB"]
    assert sum(band["sizes"] for band in bands.values()) == len(parse_nccl_log(log).rows)
    large, small = bands[">= 1 MiB"], bands["< 64 KiB"]
    assert large["median_error_after_pct"] == pytest.approx(data["median_error_after_pct"])
    assert large["median_error_after_pct"] < large["median_error_before_pct"]
    assert small["median_error_after_pct"] > small["median_error_before_pct"]
    (note,) = [n for n in data["notes"] if "< 64 KiB" in n["message"]]
    assert note["kind"] == "fit" and note["key"] == "--min-bytes"
    assert main(["calibrate", "nccl", str(log), "--cluster", "dgx-a100", "--nodes", "2"]) == 0
    text = capsys.readouterr().out
    assert "note: fit [--min-bytes]: sizes < 64 KiB: median |error|" in text


def test_a_log_the_parameters_explain_gets_no_note(small_cluster, tmp_path):
    truth = apply_calibration(CommParams(), {"network": 0.6, "nvlink": 0.7, "pcie": 0.9},
                              2.0)
    rows = run_benchmark(small_cluster, "all_reduce", size_series(2**10, 2**28, 4),
                         params=truth)
    path = tmp_path / "measured.txt"
    path.write_text(format_table(rows))
    result = calibrate_nccl(parse_nccl_log(path), small_cluster, op="all_reduce")
    assert [band.sizes for band in result.bands] == [3, 2, 5]  # 1K 4K 16K, 64K 256K, 1M..
    assert result.notes == ()
    for band in result.bands:
        assert band.median_error_after_pct <= band.median_error_before_pct + 0.05
