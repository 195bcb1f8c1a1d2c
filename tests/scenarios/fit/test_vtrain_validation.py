"""vTrain's measured Megatron-DeepSpeed runs (shared/data/training/vtrain) on a handful of
rows: the error bounds docs/validation.md reports for the ``megatron-deepspeed`` stack,
pinned so that a change to the compute model that moves them shows here.  The whole table
is ``distsim validate runs`` with scenarios/examples/validation/vtrain-multi.yaml."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.fit.validate_runs import read_map, read_runs, simulate_rows

from tests.conftest import REPO_ROOT, _shared_data_dir

# Rows (CSV line) across the model sizes where the uncalibrated stack is within the
# issue's targets (|error| bound in %), and one where it is not (line 52: 39.1B at TP 2,
# 38 % optimistic: docs/validation.md says what is missing).
WITHIN = {20: 6.0, 39: 5.0, 56: 5.0, 83: 5.0}
OUTSIDE = 52


@pytest.fixture(scope="module")
def errors() -> dict[int, float]:
    data = _shared_data_dir("training")
    if data is None:
        pytest.skip("shared/data/training is not present")
    runs_map = read_map(REPO_ROOT / "scenarios" / "examples" / "validation" /
                        "vtrain-multi.yaml")
    rows = [r for r in read_runs(data / "training" / "vtrain" / "ground_truth_multi.csv",
                                 runs_map) if r.line in (*WITHIN, OUTSIDE)]
    results = simulate_rows(runs_map, rows)
    assert all(r.predicted_s is not None for r in results), [r.failure for r in results]
    return {r.row.line: r.error_pct for r in results}


@pytest.mark.parametrize("line", sorted(WITHIN))
def test_rows_within_their_documented_error(errors, line):
    assert abs(errors[line]) <= WITHIN[line]


def test_the_documented_miss_stays_a_miss_in_the_same_direction(errors):
    assert -45 < errors[OUTSIDE] < -30
