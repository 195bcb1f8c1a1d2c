"""vTrain's measured Megatron-DeepSpeed runs (shared/data/training/vtrain) on a handful of
rows: the error bounds docs/validation.md reports, pinned so that a change to the compute
model that moves them shows here.  The whole table is validation/vtrain/run_vtrain.py's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT, _shared_data_dir

# Rows (CSV line) across the four model sizes where the uncalibrated megatron-deepspeed
# stack is within the targets, and one where it is not (line 52: 39.1B at TP 2,
# 38 % optimistic: docs/validation.md says what is missing).
WITHIN = {20: 8.0, 39: 5.0, 56: 5.0, 83: 5.0}
OUTSIDE = 52


@pytest.fixture(scope="module")
def vtrain() -> ModuleType:
    """validation/vtrain/run_vtrain.py, imported from its file."""
    if _shared_data_dir("training") is None:
        pytest.skip("shared/data/training is not present")
    path = REPO_ROOT / "validation" / "vtrain" / "run_vtrain.py"
    spec = importlib.util.spec_from_file_location("run_vtrain", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_vtrain"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows(vtrain: ModuleType) -> dict[int, dict]:
    data = _shared_data_dir("training")
    assert data is not None
    table = vtrain.read_rows(Path(data) / "training" / "vtrain" / "ground_truth_multi.csv")
    return {row["line"]: row for row in table}


@pytest.mark.parametrize("line", sorted(WITHIN))
def test_rows_within_their_documented_error(vtrain, rows, line):
    row = rows[line]
    error = 100 * (vtrain.predict(row, None) / row["measured_s"] - 1)
    assert abs(error) <= WITHIN[line]


def test_the_documented_miss_stays_a_miss_in_the_same_direction(vtrain, rows):
    row = rows[OUTSIDE]
    error = 100 * (vtrain.predict(row, None) / row["measured_s"] - 1)
    assert -45 < error < -30


def test_spearman_closed_forms(vtrain):
    assert vtrain.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert vtrain.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # Ties take the average rank: ranks (0.5, 0.5, 2) against (0, 1, 2).
    assert vtrain.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254, rel=1e-6)
