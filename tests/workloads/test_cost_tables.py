"""Profiled cost tables: round trip, interpolation rule, and errors that point at the line."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import ConfigError, ParseError
from distsim_gpu.workloads.cost.compute import (
    CostRow,
    RooflineCosts,
    TableCosts,
    TableHeader,
    read_cost_table,
    write_cost_table,
)
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import get_model

HEADER = TableHeader(software="torch 2.3.0, CUDA 12.1", date="2024-05-01",
                     source="unit test", gpu="h100-sxm", precision="bf16", model="llama3-8b")
MODEL = get_model("llama3-8b")  # hidden 4096


def _rows() -> list[CostRow]:
    rows = []
    for mb, fwd in ((1, 0.010), (4, 0.034)):
        rows.append(CostRow("h100-sxm", "transformer_layer", "fwd", mb, 4096, 4096, 1, fwd))
        rows.append(CostRow("h100-sxm", "transformer_layer", "bwd", mb, 4096, 4096, 1,
                            2 * fwd))
        rows.append(CostRow("h100-sxm", "transformer_layer", "recompute", mb, 4096, 4096, 1,
                            fwd))
    rows.append(CostRow("h100-sxm", "transformer_layer", "fwd", 1, 2048, 4096, 1, 0.004))
    rows.append(CostRow("h100-sxm", "transformer_layer", "fwd", 1, 4096, 4096, 2, 0.0055,
                        sequence_parallel=True))
    rows.append(CostRow("h100-sxm", "loss", "fwd", 1, 4096, 4096, 1, 0.003))
    return rows


@pytest.fixture(params=["table.yaml", "table.csv"])
def table_path(request, tmp_path):
    path = tmp_path / request.param
    write_cost_table(path, HEADER, _rows())
    return path


def test_round_trip_is_exact(table_path):
    header, rows = read_cost_table(table_path)
    assert header == HEADER
    assert list(rows) == _rows()


def test_to_file_round_trip(table_path, tmp_path):
    costs = TableCosts.from_file(table_path)
    again = tmp_path / ("again" + table_path.suffix)
    costs.to_file(again)
    assert read_cost_table(again) == read_cost_table(table_path)


def test_exact_lookup_and_linear_interpolation(table_path):
    costs = TableCosts.from_file(table_path)
    assert costs.gpu == "h100-sxm"
    assert costs.layer_time_s("fwd", MODEL, LayerShard(micro_batch=1, seq_len=4096)) == 0.010
    # micro_batch 2 lies a third of the way from 4096 to 16384 tokens.
    t = costs.layer_time_s("fwd", MODEL, LayerShard(micro_batch=2, seq_len=4096))
    assert t == pytest.approx(0.010 + (0.034 - 0.010) * (8192 - 4096) / (16384 - 4096))
    assert costs.layer_time_s("bwd", MODEL, LayerShard(micro_batch=3,
                                                       seq_len=4096)) == pytest.approx(
        2 * (0.010 + 0.024 * 2 / 3))
    assert costs.warnings == ()


def test_recompute_and_sequence_parallel_rows(table_path):
    costs = TableCosts.from_file(table_path)
    assert costs.layer_time_s("recompute", MODEL, LayerShard(micro_batch=4, seq_len=4096)) == 0.034
    assert costs.layer_time_s("fwd", MODEL, LayerShard(micro_batch=1, seq_len=4096, tp=2,
                                                       sequence_parallel=True)) == 0.0055


def test_extrapolation_is_proportional_and_warned(table_path):
    costs = TableCosts.from_file(table_path)
    t = costs.layer_time_s("fwd", MODEL, LayerShard(micro_batch=8, seq_len=4096))
    assert t == pytest.approx(0.034 * 2)
    assert len(costs.warnings) == 1
    assert "extrapolated proportionally" in costs.warnings[0]
    costs.layer_time_s("fwd", MODEL, LayerShard(micro_batch=8, seq_len=4096))
    assert len(costs.warnings) == 1  # not repeated


def test_unmeasured_seq_len_interpolates_over_tokens_with_warning(table_path):
    costs = TableCosts.from_file(table_path)
    # 3072 tokens: between the (1, 2048) and (1, 4096) points.
    t = costs.layer_time_s("fwd", MODEL, LayerShard(micro_batch=1, seq_len=3072))
    assert t == pytest.approx(0.004 + (0.010 - 0.004) * 0.5)
    assert "seq_len 3072 not measured" in costs.warnings[0]


def test_missing_key_names_what_is_missing_and_what_exists(table_path):
    costs = TableCosts.from_file(table_path)
    with pytest.raises(ConfigError) as info:
        costs.layer_time_s("fwd", MODEL, LayerShard(micro_batch=1, seq_len=4096, tp=4))
    text = str(info.value)
    assert "no 'transformer_layer' 'fwd' rows for gpu h100-sxm, hidden 4096, tp 4" in text
    assert "hidden 4096 tp 1 sequence_parallel false" in text
    assert str(table_path) in text
    with pytest.raises(ConfigError) as info:
        costs.embedding_time_s("fwd", MODEL, micro_batch=1, seq_len=4096)
    assert "kinds/passes" in str(info.value) and "loss/fwd" in str(info.value)


def test_fallback_for_absent_kinds_and_optimizer(table_path):
    roofline = RooflineCosts(get_gpu("h100"))
    costs = TableCosts.from_file(table_path, fallback=roofline)
    assert costs.embedding_time_s("fwd", MODEL, micro_batch=1, seq_len=4096) == (
        roofline.embedding_time_s("fwd", MODEL, micro_batch=1, seq_len=4096))
    assert costs.loss_time_s("fwd", MODEL, micro_batch=1, seq_len=4096) == 0.003
    assert costs.optimizer_step_time_s(1e6) == roofline.optimizer_step_time_s(1e6)
    with pytest.raises(ConfigError, match="fallback"):
        TableCosts.from_file(table_path).optimizer_step_time_s(1e6)


def test_gpu_selection(tmp_path):
    rows = [*_rows(), CostRow("a100-80gb", "loss", "fwd", 1, 4096, 4096, 1, 0.01)]
    path = tmp_path / "two.yaml"
    write_cost_table(path, HEADER, rows)
    with pytest.raises(ConfigError, match="several GPUs"):
        TableCosts.from_file(path)
    assert TableCosts.from_file(path, gpu="A100").gpu == "a100-80gb"
    with pytest.raises(ConfigError, match="no rows for GPU 'h200'"):
        TableCosts.from_file(path, gpu="h200")


def test_csv_accepts_units_and_header_gpu(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "# gpu: H100\n# software: torch\n# date: 2024-01-01\n# source: bench\n"
        "kind,pass,micro_batch,seq_len,hidden,tp,time_s\n"
        "transformer_layer,fwd,1,4096,4096,1,1.5 ms\n")
    costs = TableCosts.from_file(path)
    assert costs.gpu == "h100-sxm"
    assert costs.lookup("transformer_layer", "fwd", micro_batch=1, seq_len=4096,
                        hidden=4096) == pytest.approx(1.5e-3)


def test_yaml_date_is_read_as_text(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("software: x\ndate: 2024-05-01\nsource: y\ngpu: h100\nrows:\n"
                    "  - {kind: loss, pass: fwd, micro_batch: 1, seq_len: 8, hidden: 8, "
                    "tp: 1, time_s: 0.001}\n")
    header, _ = read_cost_table(path)
    assert header.date == "2024-05-01"


# ------------------------------------------------------------------ malformed files
GOOD_ROW = ("  - {kind: loss, pass: fwd, micro_batch: 1, seq_len: 8, hidden: 8, tp: 1, "
            "time_s: 0.001}\n")
YAML_HEAD = "software: x\ndate: d\nsource: s\ngpu: h100\nrows:\n"


@pytest.mark.parametrize(("text", "line", "needle"), [
    (YAML_HEAD + GOOD_ROW + "  - {kind: loss, pass: fwd, micro_batch: 1, seq_len: 8, "
     "hidden: 8, tp: 1, time_s: -1}\n", 7, "rows[1].time_s: duration must be positive"),
    (YAML_HEAD + GOOD_ROW + "  - {kind: loss, pass: forward, micro_batch: 1, seq_len: 8, "
     "hidden: 8, tp: 1, time_s: 1}\n", 7, "unknown pass 'forward'"),
    (YAML_HEAD + "  - {kind: loss, pass: fwd, micro_batch: 0, seq_len: 8, hidden: 8, "
     "tp: 1, time_s: 1}\n", 6, "rows[0].micro_batch: must be a whole number >= 1, got 0"),
    (YAML_HEAD + "  - {kind: loss, pass: fwd, micro_batch: 1, seq_len: 8, hidden: 8, "
     "tp: 1}\n", 6, "rows[0].time_s: missing value"),
    (YAML_HEAD + "  - {kind: loss, pass: fwd, micro_batch: 1, seqlen: 8, hidden: 8, "
     "tp: 1, time_s: 1}\n", 6, "did you mean 'seq_len'"),
    (YAML_HEAD + GOOD_ROW + GOOD_ROW, 7, "duplicate measurement (first on line 6)"),
    (YAML_HEAD + "  - {kind: loss, pass: fwd\n", 7, "malformed YAML"),
    ("software: x\ndate: d\nsource: s\ngpus: h100\nrows:\n" + GOOD_ROW, 4,
     "did you mean 'gpu'"),
    ("software: x\ndate: d\ngpu: h100\nrows:\n" + GOOD_ROW, 1,
     "missing header field 'source'"),
    ("software: x\ndate: d\nsource: s\nrows:\n" + GOOD_ROW, 5, "no GPU"),
    ("software: x\ndate: d\nsource: s\ngpu: h100\nrows: []\n", 5, "non-empty list"),
    ("- just\n- a list\n", 1, "must be a mapping"),
])
def test_malformed_yaml_names_file_and_line(tmp_path, text, line, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ParseError) as info:
        read_cost_table(path)
    assert info.value.source == str(path)
    assert info.value.line == line, str(info.value)
    assert needle in str(info.value)


CSV_HEAD = "# software: x\n# date: d\n# source: s\n# gpu: h100\n"
CSV_COLUMNS = "kind,pass,micro_batch,seq_len,hidden,tp,time_s\n"


@pytest.mark.parametrize(("text", "line", "needle"), [
    (CSV_HEAD + CSV_COLUMNS + "loss,fwd,1,8,8,1,0.1\nloss,fwd,1,8,8,one,0.1\n", 7,
     "tp: must be a whole number >= 1, got 'one'"),
    (CSV_HEAD + CSV_COLUMNS + "loss,fwd,1,8,8,1\n", 6, "expected 7 cells, found 6"),
    (CSV_HEAD + CSV_COLUMNS + "loss,fwd,1,8,8,1,fast\n", 6, "cannot read 'fast'"),
    (CSV_HEAD + "kind,pass,micro_batch,seq_len,hidden,tp,time\n", 5,
     "did you mean 'time_s'"),
    (CSV_HEAD + "kind,pass,micro_batch,seq_len,hidden,time_s\n", 5, "missing column(s) tp"),
    ("# software: x\n# dat: d\n", 2, "unknown header field"),
    (CSV_HEAD + CSV_COLUMNS + "loss,fwd,1,8,8,1,0.1\nloss,fwd,1,8,8,1,0.2\n", 7,
     "duplicate measurement"),
    (CSV_HEAD, 1, "no column line"),
])
def test_malformed_csv_names_file_and_line(tmp_path, text, line, needle):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ParseError) as info:
        read_cost_table(path)
    assert info.value.source == str(path)
    assert info.value.line == line, str(info.value)
    assert needle in str(info.value)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(ConfigError, match="no cost table file here"):
        read_cost_table(tmp_path / "absent.yaml")
    other = tmp_path / "t.json"
    other.write_text("{}")
    with pytest.raises(ConfigError) as info:
        read_cost_table(other)
    assert str(info.value) == (f"{other}: unknown cost table format '.json' "
                               "(valid: .csv, .yaml, .yml)")
    with pytest.raises(ConfigError, match=r"unknown cost table format '\.txt'"):
        write_cost_table(tmp_path / "t.txt", TableHeader(software="x", date="d", source="s",
                                                         gpu="h100"), [])
    assert not (tmp_path / "t.txt").exists()


@pytest.mark.parametrize(("text", "key", "line", "message"), [
    (YAML_HEAD + "  - {kind: loss, pass: Forward, micro_batch: 1, seq_len: 8, hidden: 8, "
     "tp: 1, time_s: 1}\n", "rows[0].pass", 6,
     "unknown pass 'Forward' (did you mean 'fwd'?"),
    (YAML_HEAD + "  - {kind: loss, pass: fwd, micro_batch: 1, seqlen: 8, hidden: 8, "
     "tp: 1, time_s: 1}\n", "rows[0].seqlen", 6, "unknown column (did you mean 'seq_len'?"),
    ("software: x\ndate: d\nsource: s\ngpus: h100\nrows:\n" + GOOD_ROW, "gpus", 4,
     "unknown key (did you mean 'gpu'?"),
])
def test_unknown_names_in_a_yaml_table_name_key_and_line(tmp_path, text, key, line, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ParseError) as info:
        read_cost_table(path)
    assert str(info.value).startswith(f"{path}:{line}: {key}: {message}")


@pytest.mark.parametrize(("text", "message"), [
    (CSV_HEAD + "kind,pass,micro_batch,seq_len,hidden,tp,time\n",
     ":5: unknown column 'time' (did you mean 'time_s'?"),
    ("# software: x\n# dat: d\n", ":2: unknown header field 'dat' (did you mean 'date'?"),
])
def test_unknown_names_in_a_csv_table_name_the_line(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ParseError) as info:
        read_cost_table(path)
    assert str(info.value).startswith(f"{path}{message}")


def test_a_local_attention_layer_timed_by_the_table_is_a_note(table_path):
    """A profiled layer attended in full: the table times a windowed layer with it, and
    the run says so; full layers of the same model, and models without windows, do not."""
    from distsim_gpu.workloads.specs.models import model_from_mapping
    windowed = model_from_mapping({"preset": "llama3-8b", "attention_window": {
        "tokens": 1024, "full_every": 2}})
    costs = TableCosts.from_file(table_path)
    full = LayerShard(micro_batch=1, seq_len=4096, layer_index=1)
    assert costs.layer_time_s("fwd", windowed, full) == 0.010 and costs.notes == ()
    local = LayerShard(micro_batch=1, seq_len=4096, layer_index=0)
    assert costs.layer_time_s("fwd", windowed, local) == 0.010
    (note,) = costs.notes
    assert note.kind == "defaulted" and "model.attention_window" in note.message
