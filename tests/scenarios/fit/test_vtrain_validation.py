"""vTrain's measured Megatron-DeepSpeed runs (shared/data/training/vtrain) on a handful of
rows: the error bounds docs/validation.md reports for the ``megatron-deepspeed`` stack,
pinned so that a change to the compute model that moves them shows here.  The whole table
is ``distsim validate runs`` with scenarios/examples/validation/vtrain-multi.yaml."""

from __future__ import annotations

import csv
import importlib.util

import pytest
from distsim_gpu.measured.nccl_log import parse_nccl_log
from distsim_gpu.scenarios.fit.validate_runs import read_map, read_runs, simulate_rows

from tests.conftest import REPO_ROOT, _shared_data_dir

# Rows (CSV line) across the model sizes where the uncalibrated stack is within the
# issue's targets (|error| bound in %), and one where it is not (line 52: 39.1B at TP 2,
# 38 % optimistic: docs/validation.md says what is missing).
WITHIN = {20: 6.0, 39: 5.0, 56: 5.0, 83: 5.0}
OUTSIDE = 52


def _errors(map_name: str, table_name: str, lines: set[int]) -> dict[int, float]:
    """Per CSV line of ``lines``, the simulated error (%) of that vTrain row through the
    map ``map_name`` (scenarios/examples/validation); skips without the shared data."""
    data = _shared_data_dir("training")
    if data is None:
        pytest.skip("shared/data/training is not present")
    runs_map = read_map(REPO_ROOT / "scenarios" / "examples" / "validation" / map_name)
    rows = [r for r in read_runs(data / "training" / "vtrain" / table_name, runs_map)
            if r.line in lines]
    results = simulate_rows(runs_map, rows)
    assert all(r.predicted_s is not None for r in results), [r.failure for r in results]
    return {r.row.line: r.error_pct for r in results}


@pytest.fixture(scope="module")
def errors() -> dict[int, float]:
    return _errors("vtrain-multi.yaml", "ground_truth_multi.csv", {*WITHIN, OUTSIDE})


@pytest.mark.parametrize("line", sorted(WITHIN))
def test_rows_within_their_documented_error(errors, line):
    assert abs(errors[line]) <= WITHIN[line]


def test_the_documented_miss_stays_a_miss_in_the_same_direction(errors):
    assert -45 < errors[OUTSIDE] < -30


def test_vtrains_allreduce_table_reads_as_an_nccl_tests_log():
    """validation/vtrain/lut_to_nccl_tests.py: every row of the 8-GPU table, its sizes and
    times (ns -> s) as the LUT states them, through distsim's own nccl-tests reader."""
    data = _shared_data_dir("training")
    if data is None:
        pytest.skip("shared/data/training is not present")
    script = REPO_ROOT / "validation" / "vtrain" / "lut_to_nccl_tests.py"
    spec = importlib.util.spec_from_file_location("lut_to_nccl_tests", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lut = data / "training" / "vtrain" / "allreduce_lut" / "a100" / "AR_GPU8_1M_1024M_LUT.csv"
    table = list(csv.reader(lut.open()))[1:]
    log = parse_nccl_log(module.convert(str(lut)), source="ar8.txt")
    assert len(log.rows) == len(table) == 1024
    for row, (size, _, _, t_out, _, t_in, _) in zip(log.rows, table, strict=True):
        assert row.size_bytes == int(size)
        assert row.out_of_place_time_s == pytest.approx(float(t_out) * 1e-9, abs=1e-7)
        assert row.in_place_time_s == pytest.approx(float(t_in) * 1e-9, abs=1e-7)


# Single node (ground_truth_single.csv): a GEMM-bound row (h 2048, tp 4, micro-batch 8)
# and the host-bound one docs/validation.md quotes (h 1024, tp 8, micro-batch 1: 5.1 ms
# measured per layer and micro-batch).  The eager host's issue timeline took that row from
# about -80 % to -56 %; what is left is host time outside kernel launches (the docs).
SINGLE_WITHIN = {42: 3.0}
SINGLE_HOST_BOUND = 285


def test_single_node_rows_gemm_bound_within_and_host_bound_short_by_what_the_docs_say():
    errors = _errors("vtrain-single.yaml", "ground_truth_single.csv",
                     {*SINGLE_WITHIN, SINGLE_HOST_BOUND})
    assert abs(errors[42]) <= SINGLE_WITHIN[42]
    assert -60 < errors[SINGLE_HOST_BOUND] < -50
