"""The command line: output shapes, --set, --json, and clear errors instead of tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from distsim_gpu.scenarios.cli.main import main


def run_cli(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_nccl_tests_prints_the_nccl_tests_table(capsys):
    status, out, _ = run_cli(capsys, "nccl-tests", "--cluster", "dgx-a100", "--nodes", "2",
                             "-b", "8", "-e", "1M", "-f", "4")
    assert status == 0
    data_rows = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert [int(line.split()[0]) for line in data_rows] == [8, 32, 128, 512, 2048, 8192,
                                                            32768, 131072, 524288]
    assert all(len(line.split()) == 13 for line in data_rows)
    assert "# Avg bus bandwidth" in out
    assert "busbw" in out


def test_nccl_tests_json_and_set_override(capsys):
    args = ("nccl-tests", "--cluster", "dgx-a100", "--nodes", "2", "-b", "1G", "-e", "1G",
            "--algo", "ring", "--json")
    _, fast, _ = run_cli(capsys, *args)
    _, slow, _ = run_cli(capsys, *args, "--set", 'nic.bandwidth="100 Gbps"')
    fast_row, slow_row = json.loads(fast)["rows"][0], json.loads(slow)["rows"][0]
    assert fast_row["algorithm"] == "ring"
    assert slow_row["busbw_bytes_per_s"] == pytest.approx(fast_row["busbw_bytes_per_s"] / 2,
                                                          rel=0.02)
    assert json.loads(slow)["cluster"]["nic"]["bandwidth"] == pytest.approx(12.5e9)


def test_comm_overrides_reach_the_collectives(capsys):
    args = ("nccl-tests", "--cluster", "dgx-h100", "--nodes", "1", "-b", "1G", "-e", "1G",
            "--json", "--algo", "ring")
    _, default, _ = run_cli(capsys, *args)
    _, ideal, _ = run_cli(capsys, *args, "--set", "comm.link_efficiency.nvlink=1.0")
    ratio = (json.loads(ideal)["rows"][0]["busbw_bytes_per_s"]
             / json.loads(default)["rows"][0]["busbw_bytes_per_s"])
    assert ratio == pytest.approx(1 / 0.82, rel=0.01)


@pytest.mark.parametrize(("cluster", "efficiency"), [("dgx-a100", 0.78), ("dgx-h100", 0.82)])
def test_a_clusters_nvlink_runs_at_its_generations_efficiency(capsys, cluster, efficiency):
    # One node's ring all-reduce at 1 GiB is NVLink-bound: its bus bandwidth is the
    # generation's efficiency times the per-GPU NVLink rate, within the latency terms.
    args = ("nccl-tests", "--cluster", cluster, "--nodes", "1", "-b", "1G", "-e", "1G",
            "--json", "--algo", "ring")
    _, default, _ = run_cli(capsys, *args)
    _, ideal, _ = run_cli(capsys, *args, "--set", "comm.link_efficiency.nvlink=1.0")
    ratio = (json.loads(default)["rows"][0]["busbw_bytes_per_s"]
             / json.loads(ideal)["rows"][0]["busbw_bytes_per_s"])
    assert ratio == pytest.approx(efficiency, rel=0.01)


@pytest.mark.parametrize(("argv", "message"), [
    (["nccl-tests", "--cluster", "dgx-a101"], "did you mean 'dgx-a100'"),
    (["nccl-tests", "--cluster", "dgx-a100", "--set", "nic.bandwith=1"], "bandwith"),
    (["nccl-tests", "--cluster", "dgx-a100", "--set", "nic.bandwidth=-5 Gbps"], "positive"),
    (["nccl-tests", "--cluster", "dgx-a100", "--set", "novalue"], "KEY=VALUE"),
    (["nccl-tests", "--cluster", "dgx-a100", "-b", "1G", "-e", "1M"], "min"),
    (["nccl-tests", "--cluster", "dgx-a100", "-b", "lots"], "cannot read 'lots'"),
    (["nccl-tests", "--cluster", "dgx-a100", "--set", "comm.link_efficiency.nvlink=2"],
     "(0, 1]"),
    (["nccl-tests", "--cluster", "dgx-a100", "--nodes", "0"], "nodes"),
    (["validate", "nccl", "/nonexistent/log.txt", "--cluster", "dgx-a100"], "log.txt"),
])
def test_bad_input_is_a_clear_error_with_status_2(capsys, argv, message):
    status, _, err = run_cli(capsys, *argv)
    assert status == 2
    assert err.startswith("distsim: error: ")
    assert message in err
    assert "Traceback" not in err


def test_malformed_log_names_the_line(capsys, tmp_path):
    log = tmp_path / "bad.txt"
    log.write_text("#       size         count      type   redop    root     time   algbw   "
                   "busbw #wrong     time   algbw   busbw #wrong\n"
                   "        1024           256     float     sum      -1    41.97    0.02    "
                   "0.05      0    40.56    0.03    0.05      0\n"
                   "        2048           512     float     sum      -1    fast    0.05    "
                   "0.09      0    41.29    0.05    0.09      0\n")
    status, _, err = run_cli(capsys, "validate", "nccl", str(log), "--cluster", "dgx-a100")
    assert status == 2
    assert "bad.txt:3" in err


def test_validate_prints_measured_predicted_and_medians(capsys, shared_data):
    log = shared_data / "nccl" / "oci_oke_a100_40gb_2node_roce_allreduce.txt"
    status, out, _ = run_cli(capsys, "validate", "nccl", str(log), "--cluster", "dgx-a100",
                             "--nodes", "2")
    assert status == 0
    assert "median |error|, sizes >= 64 MiB" in out
    assert "median |error|, sizes <= 64 KiB" in out
    status, out, _ = run_cli(capsys, "validate", "nccl", str(log), "--cluster", "dgx-a100",
                             "--nodes", "2", "--json")
    data = json.loads(out)
    assert len(data["rows"]) == 31
    assert {"median_abs_error_large_pct", "median_abs_error_small_pct"} <= data.keys()


def test_console_script_runs_as_a_module():
    done = subprocess.run([sys.executable, "-m", "distsim_gpu.scenarios", "nccl-tests", "--cluster",
                           "switch", "-b", "1M", "-e", "1M"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "1048576" in done.stdout


def test_old_output_spellings_still_work_and_say_what_to_write(
        tiny, write_scenario, tmp_path, capsys) -> None:
    """One grammar: --out DIR writes a folder, -o FILE one file; a command's old spelling
    is kept as an alias that says which to write instead."""
    from distsim_gpu.scenarios.cli.main import main

    scenario = str(write_scenario(tmp_path / "tiny.yaml", tiny()))
    assert main(["trace", "export-chakra", scenario, "-o", str(tmp_path / "old")]) == 0
    assert "-o is deprecated here; write --out DIR" in capsys.readouterr().err
    assert list((tmp_path / "old").glob("*.et"))
    assert main(["trace", "export-chakra", scenario, "--out", str(tmp_path / "new")]) == 0
    assert "deprecated" not in capsys.readouterr().err
    # Both at once is an error, not a silent choice.
    with pytest.raises(SystemExit):
        main(["trace", "export-chakra", scenario, "--out", str(tmp_path / "a"), "-o",
              str(tmp_path / "b")])
