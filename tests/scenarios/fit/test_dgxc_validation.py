"""NVIDIA's DGX H100 tables as ``distsim validate runs`` reads them: the table builder
(validation/dgxc/build_table.py) on a small fixture shaped like the source, the shipped table's
invariants, and the map (scenarios/examples/validation/dgxc-h100.yaml) turning its rows into
scenarios."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest
from distsim_gpu.scenarios.fit.runs_table import read_map, read_runs
from distsim_gpu.scenarios.fit.validate_runs import simulate_rows
from distsim_gpu.scenarios.scenario import scenario_from_mapping
from distsim_gpu.workloads.specs.models import get_model

from tests.conftest import REPO_ROOT, _shared_data_dir

TABLE = REPO_ROOT / "validation" / "dgxc" / "dgxc-h100.csv"
MAP = REPO_ROOT / "scenarios" / "examples" / "validation" / "dgxc-h100.yaml"


def _builder():
    script = REPO_ROOT / "validation" / "dgxc" / "build_table.py"
    spec = importlib.util.spec_from_file_location("dgxc_build_table", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the class is built
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build_table = _builder()

WIDE_HEADER = ["release", "framework", "table_title", "model_family", "model_size", "dtype",
               "gpu_type", "gpus", "tp", "pp", "cp", "vp", "ep", "fsdp", "dp", "mbs", "gbs",
               "ga", "layers", "seq_len", "step_time_s", "tokens_per_s", "mfu_pct",
               "config_source", "source_file"]
NEMO = "NeMo/Megatron (PyTorch)"


def _record(release, title, family, size, dtype, gpus, tp, pp, cp, vp, mbs, gbs, layers,
            seq, step, source, framework=NEMO, gpu_type="H100"):
    values = dict(release=release, framework=framework, table_title=title,
                  model_family=family, model_size=size, dtype=dtype, gpu_type=gpu_type,
                  gpus=gpus, tp=tp, pp=pp, cp=cp, vp=vp, mbs=mbs, gbs=gbs, layers=layers,
                  seq_len=seq, step_time_s=step, source_file=source)
    return {name: str(values.get(name, "")) for name in WIDE_HEADER}


GPT = "NeMo Megatron BF16 (TP=4,PP=8, MBS=1, VP=12, SEQ=2048)"
L405 = "Llama 3.1 405b BF16 (TP=8, PP=9, CP=2, VP=7, MBS=1, GA=63)"
NEMOTRON_README = """# H100s specifications
| Size | Precision | GPUs | SeqLen | Layers | TP  | PP  | CP  | EP  | DP  | VP  | MBS | GBS  | GA  |
|------|:---------:|:----:|:------:|:------:|:---:|:---:|:---:|:---:|:---:|:---:|:---:|:----:|:---:|
| 15b   | BF16/FP8  | 16   | 4096  | 32     | 2   | 1   | 1   | NA  | 8   | NA  | 2   | 64   | 4 |
# H100 Performance
| Nemotron4 15b FP8 H100 | 16x H100 GPUs |
|---|:---:|
Training step time (seconds per step)| 1.988|
# GB200 specifications
| 15b   | BF16/FP8  | 16   | 4096  | 32     | 4   | 1   | 1   | NA  | 4   | NA  | 2   | 32   | 4 |
"""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A dgxc_benchmarking folder in miniature: one table copied into a later release, a
    later release's new measurement of it, source typos, rows to leave out, a raw README."""
    a, b, c = "2025-05-21_v24.11.1__x_nemo.md", "2025-05-21_v25.02__y_nemo.md", "z.md"
    records = [
        # v24.11.1's GPT-3 table (no layers written), copied verbatim into v25.02 ...
        _record("v24.11.1", GPT, "NeMo Megatron", "", "BF16", 128, 4, 8, "", 12, 1, 256,
                "", 2048, "8.91", a),
        _record("v24.11.1", GPT, "NeMo Megatron", "", "BF16", 256, 4, 8, "", 12, 1, 512,
                "", 2048, "8.95", a),
        _record("v25.02", GPT, "NeMo Megatron", "", "BF16", 128, 4, 8, "", 12, 1, 256, "",
                2048, "8.91", b),
        _record("v25.02", GPT, "NeMo Megatron", "", "BF16", 256, 4, 8, "", 12, 1, 512, "",
                2048, "8.95", b),
        # ... and a new measurement in v25.04, its GBS misprinted as 1204 at 512 GPUs.
        _record("v25.04", "NeMo Megatron BF16", "NeMo Megatron BF16", "", "BF16", 512, 4, 8,
                1, 12, 1, 1204, 96, 2048, "8.42", c),
        # The 405B proxy of 21 layers, its time misprinted "8.7  5".
        _record("v24.11.1", L405, "Llama", "405B", "BF16", 96, 8, 3, 2, 7, 1, 126, 21, "",
                "8.7  5", a),
        _record("v25.04", "Llama 3.1 405b FP8", "Llama", "405B", "FP8", 64, 8, 4, 2, 8, 1, 64,
                30, 8192, "6.32", c),
        _record("v24.11.1", "Grok 1 314b BF16", "Grok", "314B", "BF16", 8, 4, 1, 1, "", 1,
                1024, 2, 4096, "24.03", a),
        _record("v24.11.1", "Maxtext Llama3 70b BF16", "Maxtext Llama3", "70B", "BF16", 64,
                "", "", "", "", "", "", "", "", "14.0", a, framework="JAX-MaxText"),
        _record("v25.04", "Llama3 8b Finetuning SFT BF16", "Llama3", "8B", "BF16", 8, 1, 1, 1,
                "", 1, 32, "", 4096, "1.32", c),
        _record("v25.05", "Llama3.1 405b BF16", "Llama3.1", "405B", "BF16", 128, 4, 8, 2, 8,
                1, 64, 126, 8192, "5.0", c, gpu_type="GB200"),
    ]
    with open(tmp_path / build_table.WIDE, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=WIDE_HEADER)
        writer.writeheader()
        writer.writerows(records)
    (tmp_path / "raw").mkdir()
    for name in ("2025-06-10_v25.05__8a_nemotron_README.md",
                 "2025-06-18_v25.05.01__60_nemotron_README.md"):
        (tmp_path / "raw" / name).write_text(NEMOTRON_README, encoding="utf-8")
    (tmp_path / "raw_index.txt").write_text(
        f"{a}|p|c|2025-05-21|v24.11.1_|x\n{b}|p|c|2025-05-21|v25.02_|x\n"
        f"{c}|p|c|2025-05-21|v25.04_|x\n"
        "2025-06-10_v25.05__8a_nemotron_README.md|p|c|2025-06-10|v25.05_|x\n"
        "2025-06-18_v25.05.01__60_nemotron_README.md|p|c|2025-06-18|v25.05.01_|x\n",
        encoding="utf-8")
    return tmp_path


def test_the_builder_keeps_each_measurement_once_and_resolves_the_sources_gaps(source):
    rows, left_out, _notes = build_table.build(source)
    got = {(r.model, r.precision, r.gpus, r.release): r for r in rows}
    assert sorted(got) == sorted([
        ("gpt3-175b", "bf16", 128, "v24.11.1"), ("gpt3-175b", "bf16", 256, "v24.11.1"),
        ("gpt3-175b", "bf16", 512, "v25.04"), ("llama3.1-405b", "bf16", 96, "v24.11.1"),
        ("llama3.1-405b", "fp8", 64, "v25.04"), ("nemotron4-15b", "fp8", 16, "v25.05")])
    gpt = got[("gpt3-175b", "bf16", 128, "v24.11.1")]
    assert (gpt.layers, gpt.seq_len, gpt.cp, gpt.dp, gpt.partition) == (96, 2048, 1, 4,
                                                                        "uniform")
    assert got[("gpt3-175b", "bf16", 512, "v25.04")].gbs == 1024
    proxy = got[("llama3.1-405b", "bf16", 96, "v24.11.1")]
    assert (proxy.step_time_s, proxy.layers, proxy.seq_len, proxy.dp) == (8.75, 21, 8192, 2)
    assert got[("llama3.1-405b", "fp8", 64, "v25.04")].partition == "embedding"
    nemotron = got[("nemotron4-15b", "fp8", 16, "v25.05")]
    assert (nemotron.tp, nemotron.dp, nemotron.mbs, nemotron.gbs, nemotron.step_time_s) == (
        2, 8, 2, 64, 1.988)
    # Two copied GPT-3 rows and the v25.05.01 copy of the Nemotron row; four left out.
    assert left_out["repeat of an earlier release's measurement"] == 3
    assert sum(left_out.values()) == 3 + 4


def test_a_republished_measurement_with_another_configuration_is_reported(source):
    rows = [build_table.make_row("gpt3-175b", "BF16", (128, 4, 8, 1, vp), (1, 256),
                                 (96, 2048), 8.309, (release, f"{release}.md"))
            for vp, release in ((12, "v25.02"), (6, "v25.04"))]
    order = {"v25.02.md": ("2025", (25, 2)), "v25.04.md": ("2025", (25, 4))}
    kept, notes = build_table.deduplicate(build_table.measurements([rows[:1], rows[1:]]),
                                          order)
    assert [r.vp for r in kept] == [12]
    assert len(notes) == 1 and "vp 6 (was 12)" in notes[0]


@pytest.mark.parametrize(("degrees", "batches", "shape", "why"), [
    ((96, 8, 3, 2, 7), (1, 126), (22, 8192), "do not split"),
    ((100, 8, 3, 2, 7), (1, 126), (21, 8192), "tp·pp·cp"),
    ((96, 8, 3, 2, 7), (4, 126), (21, 8192), "mbs·dp"),
])
def test_an_incomplete_configuration_is_an_error_naming_it(degrees, batches, shape, why):
    with pytest.raises(build_table.RowError, match=why):
        build_table.make_row("llama3.1-405b", "BF16", degrees, batches, shape, 1.0,
                             ("v", "f"))


def _shipped() -> list[dict[str, str]]:
    with open(TABLE, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_every_shipped_row_splits_its_gpus_and_batch_whole():
    rows = _shipped()
    assert len(rows) >= 150
    for row in rows:
        n = {k: int(row[k]) for k in ("gpus", "tp", "pp", "cp", "vp", "dp", "mbs", "gbs",
                                      "layers")}
        assert n["gpus"] == n["tp"] * n["pp"] * n["cp"] * n["dp"], row
        assert n["gbs"] % (n["mbs"] * n["dp"]) == 0, row
        assert 8 <= n["gpus"] <= 2304 and float(row["step_time_s"]) > 0
        chunks = n["pp"] * n["vp"]
        assert (n["layers"] + (2 if row["partition"] == "embedding" else 0)) % chunks == 0
        assert n["layers"] <= get_model(row["model"]).layers
        assert int(row["seq_len"]) == get_model(row["model"]).seq_len


def test_the_shipped_table_has_both_precisions_of_every_model_and_no_repeats():
    rows = _shipped()
    models = {"gpt3-175b", "llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "nemotron4-15b",
              "nemotron4-340b"}
    assert {(r["model"], r["precision"]) for r in rows} == {
        (m, p) for m in models for p in ("bf16", "fp8")}
    keys = [(r["model"], r["precision"], r["gpus"], r["step_time_s"], r["release"])
            for r in rows]
    assert len(keys) == len(set(keys))


def test_the_shipped_table_is_what_the_builder_makes_of_the_source(tmp_path):
    data = _shared_data_dir("training")
    if data is None:
        pytest.skip("shared/data/training is not present")
    out = tmp_path / "table.csv"
    assert build_table.main(["--data", str(data / build_table.DATASET), "--out",
                             str(out)]) == 0
    assert out.read_text(encoding="utf-8") == TABLE.read_text(encoding="utf-8")


def _scenario(runs_map, row):
    return scenario_from_mapping(runs_map.base, source=runs_map.base_source,
                                 overrides=row.overrides, base_dir=runs_map.base_dir)


def test_the_map_turns_a_405b_row_into_its_scenario():
    runs_map = read_map(MAP)
    rows = read_runs(TABLE, runs_map)
    shipped = _shipped()
    line = next(i + 2 for i, r in enumerate(shipped)
                if (r["model"], r["precision"], r["gpus"], r["release"]) == (
                    "llama3.1-405b", "fp8", "512", "v25.04"))
    scenario = _scenario(runs_map, next(r for r in rows if r.line == line))
    p = scenario.parallel
    assert (p.tp, p.pp, p.cp, p.dp, p.interleave) == (8, 8, 2, 4, 8)
    assert (p.schedule, p.partition, p.sequence_parallel, p.zero) == (
        "interleaved", "embedding", True, 1)
    assert scenario.num_gpus == 512
    assert (scenario.model.name, scenario.model.layers, scenario.seq_len) == (
        "llama3.1-405b", 126, 8192)
    assert scenario.training.precision == "fp8"
    assert (scenario.training.micro_batch, scenario.training.global_batch) == (1, 256)


def test_every_row_is_a_valid_scenario():
    """Including the 405B proxy of 30 layers on pp 4 · vp 8, whose first and last chunks
    hold only the embedding and the loss, as NeMo splits it."""
    runs_map = read_map(MAP)
    for row in read_runs(TABLE, runs_map):
        _scenario(runs_map, row)


def test_the_smallest_row_simulates():
    runs_map = read_map(MAP)
    rows = read_runs(TABLE, runs_map)
    smallest = min(rows, key=lambda r: dict(r.overrides)["cluster.nodes"])
    (result,) = simulate_rows(runs_map, [smallest])
    assert result.predicted_s is not None and result.predicted_s > 0, result.failure
