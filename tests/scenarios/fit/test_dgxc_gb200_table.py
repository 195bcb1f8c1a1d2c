"""NVIDIA's GB200 NVL72 tables as ``distsim validate runs`` reads them: the table builder
(validation/dgxc/build_gb200_table.py) against the shared source, and the shipped table's
invariants."""

from __future__ import annotations

import csv
import importlib.util
import sys

import pytest
from distsim_gpu.workloads.specs.models import get_model

from tests.conftest import REPO_ROOT, _shared_data_dir

TABLE = REPO_ROOT / "validation" / "dgxc" / "dgxc-gb200.csv"


def _builder():
    folder = REPO_ROOT / "validation" / "dgxc"
    # build_gb200_table imports its sibling build_table as a script does
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("dgxc_build_gb200_table",
                                                      folder / "build_gb200_table.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


build_gb200_table = _builder()


def _shipped() -> list[dict[str, str]]:
    with open(TABLE, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_every_shipped_row_splits_its_gpus_and_batch_whole_64_per_rack():
    rows = _shipped()
    assert len(rows) == 24
    for row in rows:
        n = {k: int(row[k]) for k in ("gpus", "tp", "pp", "cp", "ep", "vp", "dp", "mbs",
                                      "gbs", "layers")}
        assert n["gpus"] == n["tp"] * n["pp"] * n["cp"] * n["dp"], row
        assert n["gpus"] % 64 == 0 and n["dp"] % n["ep"] == 0, row
        assert n["gbs"] % (n["mbs"] * n["dp"]) == 0, row
        chunks = n["pp"] * n["vp"]
        assert (n["layers"] + (2 if row["partition"] == "embedding" else 0)) % chunks == 0
        assert n["layers"] == get_model(row["model"]).layers
        assert int(row["seq_len"]) == get_model(row["model"]).seq_len


def test_the_shipped_table_has_both_precisions_of_every_model_at_three_scales():
    rows = _shipped()
    cells = {(r["model"], r["precision"], int(r["gpus"]), int(r["gbs"])) for r in rows}
    assert len(cells) == len(rows)
    for model in ("llama3.1-405b", "grok-1", "nemotron4-340b"):
        for precision in ("bf16", "fp8"):
            assert {g for m, p, g, _ in cells if (m, p) == (model, precision)} == {
                128, 256, 512}


def test_the_shipped_table_is_what_the_builder_makes_of_the_source(tmp_path):
    data = _shared_data_dir("training")
    if data is None:
        pytest.skip("shared/data/training is not present")
    out = tmp_path / "table.csv"
    source = data / "training" / "dgxc_benchmarking"
    assert build_gb200_table.main(["--data", str(source), "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == TABLE.read_text(encoding="utf-8")
