"""Every reproducer of issue 13 (hostile and huge input) ends in a clear error.

Each runs the ``distsim`` command in-process and asserts exit status 2, a
``distsim: error:`` line naming the file or key at fault, and no traceback.  The bounds
(nodes <= 16,384, layers <= 100,000, ...) are asserted in the message, so a change of a
bound is a change of this file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from distsim_gpu.collectives.nccl_tests import MAX_SIZES, size_series
from distsim_gpu.simcore.errors import ConfigError, ParseError
from distsim_gpu.simcore.units import parse_bandwidth, parse_size
from distsim_gpu.simcore.yamlfile import MAX_DEPTH, load_yaml_text

from tests.fuzz.conftest import QUICKSTART

BIG = "9" * 5000


# ------------------------------------------------------------------ --set values


@pytest.mark.parametrize("assignment, key, says", [
    ("model.position=!!float x", "model.position", "cannot read 'x' as float"),
    (f"model.layers={BIG}", "model.layers", "5000 digits is too long"),
    ("model.layers=" + "9" * 400, "model.layers", "at most 100,000"),
    ("model.layers=1000000000000000000000000000000", "model.layers", "at most 100,000"),
    ("model.layers=9223372036854775808", "model.layers", "at most 100,000"),
    ("training.global_batch=1000000000000000000000000000000", "training.global_batch",
     "at most 1,099,511,627,776"),
    ("training.global_batch=268435456", "training.global_batch", "67,108,864 micro-batches"),
    ("cluster.nodes=1.0e+30", "cluster.nodes", "at most 16,384"),
    ("model.ffn_hidden=0", "model.ffn_hidden", "leave ffn_hidden out"),
    ("communication.chunk_bytes.simple=0", "communication.chunk_bytes.simple",
     "must be positive"),
    ("cluster.nic.bandwidth=２００ Gbps", "cluster.nic.bandwidth", "cannot read"),
    # (a bandwidth without a unit is refused before its size is looked at)
    ("cluster.nic.bandwidth=" + "9" * 400, "cluster.nic.bandwidth", "needs a unit"),
    ("cluster.nic.bandwidth=1e999 B/s", "cluster.nic.bandwidth", "not finite"),
    ("cluster.nic.bandwidth=" + "9" * 401 + " GB/s", "cluster.nic.bandwidth", "cannot read"),
    ("compute.host_overhead=" + "9" * 400, "compute.host_overhead", "not finite"),
    ("compute.host_overhead=1e9", "compute.host_overhead", "must be a number in [0, 1]"),
    ("compute.gpu={preset: h100, power_limit: " + "9" * 400 + "}", "compute.gpu.power_limit",
     "not finite"),
    ("compute.gpu={preset: h100, power_limit: 1e6}", "compute.gpu.power_limit",
     "at most the rated 700 W"),
    ("compute.gpu={preset: gh200, power_limit: 300 W}", "compute.gpu.power_limit",
     "no rated board power"),
])
def test_set_value(rejects, assignment, key, says):
    err = rejects("run", QUICKSTART, "--set", assignment, names=f"--set: {key}")
    assert says in err
    assert len(err) < 700  # a long value is cut in the message, not printed whole


def test_units_read_ascii_digits_only():
    assert parse_size("200 MB") == 2e8
    for text in ("２００ MB", "٢٠٠ MB", "2e99999 B"):
        with pytest.raises(ParseError, match="cannot read"):
            parse_size(text)
    with pytest.raises(ParseError, match="not finite"):
        parse_bandwidth("1e999 B/s")
    with pytest.raises(ParseError, match="needs a unit"):
        parse_bandwidth(10**400)


# ------------------------------------------------------------------ YAML files


def _deep(depth: int) -> str:
    return "a: " + "[" * depth + "]" * depth + "\n"


def _laughs(levels: int) -> str:
    text = 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for i in range(1, levels):
        text += f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    return text


@pytest.mark.parametrize("text, line, says", [
    (_deep(10_000), 1, f"nested more than {MAX_DEPTH} levels deep"),
    (_laughs(9), 7, "aliases expand this to more than 2,000,000 values"),
    ("a: &x [1, *x]\n", 1, "an alias refers to a node that contains it"),
    ("layers: !!int 12x\n", 1, "cannot read '12x' as int"),
    ("cluster: dgx-a100\nmodel: {name: gpt3-1.3b, layers: 4, layers: 8}\n", 2,
     "key 'layers' appears twice (first at line 2)"),
    ("training:\n  micro_batch: 1\n  micro_batch: 2\n", 3,
     "key 'micro_batch' appears twice (first at line 2)"),
    (f"layers: {BIG}\n", 1, "5000 digits"),
])
def test_scenario_and_cluster_files(rejects, tmp_path, text, line, says):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert says in rejects("run", str(path), names=f"{path}:{line}: invalid YAML")
    assert says in rejects("nccl-tests", "--cluster", str(path), names=f"{path}:{line}:")


def test_shallow_aliases_still_read():
    data, lines = load_yaml_text("a: &x {b: 1}\nc: *x\nd: [*x, *x]\n", "t.yaml")
    assert data == {"a": {"b": 1}, "c": {"b": 1}, "d": [{"b": 1}, {"b": 1}]}
    assert lines["a.b"] == 1 and lines["c"] == 2
    data, _ = load_yaml_text(_deep(MAX_DEPTH - 2), "t.yaml")
    assert isinstance(data["a"], list)


def test_cluster_file_name_too_long(rejects, tmp_path):
    long_name = str(tmp_path / ("x" * 300 + ".yaml"))
    rejects("nccl-tests", "--cluster", long_name, names="no preset or cluster file")
    rejects("run", QUICKSTART, "--set", f"cluster={long_name}", names="--set: cluster")
    rejects("run", long_name, names="File name too long")


def test_cost_table_not_utf8(rejects, tmp_path):
    table = tmp_path / "costs.csv"
    table.write_bytes(b"# software: x\n\xff\xfe kind,pass\n")
    rejects("run", QUICKSTART, "--set", f"compute.costs={table}",
            names=f"{table}:2: cost table file is not UTF-8")


# ------------------------------------------------------------------ logs and traces


def test_nccl_log_device_and_fifo(rejects, tmp_path):
    rejects("validate", "nccl", "/dev/zero", "--cluster", "dgx-a100",
            names="/dev/zero: expected a nccl-tests log file, found a device")
    fifo = tmp_path / "log"
    import os
    os.mkfifo(fifo)  # opening a FIFO without a writer would block: it is never opened
    rejects("validate", "nccl", str(fifo), "--cluster", "dgx-a100", names=str(fifo))


def _trace(tmp_path, *, dur="5", step="1", world_size="2", tail=""):
    # Numbers go in as raw digits (json.dumps of a 5,000-digit int would itself fail).
    text = ('{"distributedInfo": {"rank": 0, "world_size": WS}, "traceEvents": ['
            '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": DUR, "pid": 0, '
            '"tid": 7, "args": {"device": 0, "stream": 7}}, {"ph": "X", "cat": '
            '"user_annotation", "name": "ProfilerStep#STEP", "ts": 0, "dur": 100, "pid": 1, '
            '"tid": 1}TAIL]}')
    for name, value in (("WS", world_size), ("DUR", dur), ("STEP", step), ("TAIL", tail)):
        text = text.replace(name, value, 1)
    path = tmp_path / "rank0.json"
    path.write_text(text)
    return str(path)


def test_trace_deep_arrays(rejects, tmp_path):
    path = _trace(tmp_path, tail=", " + "[" * 100_000 + "]" * 100_000)
    rejects("trace", "summary", path, names=f"{path}:1: not valid JSON for a trace")


def test_trace_world_size_too_large(rejects, tmp_path):
    path = _trace(tmp_path, world_size="1000000000000")
    rejects("trace", "summary", path, names="distributedInfo.world_size")


@pytest.mark.parametrize("field", ["dur", "step"])
@pytest.mark.parametrize("digits", [400, 5000])
def test_trace_huge_numbers_are_skipped_not_crashes(capsys, tmp_path, field, digits):
    from distsim_gpu.scenarios.cli.main import main
    path = _trace(tmp_path, **{field: "9" * digits})
    assert main(["trace", "summary", path]) == 0
    out = capsys.readouterr().out
    # A 400+ digit duration is not finite: the kernel is skipped with a note; a step number
    # past 18 digits is not a ProfilerStep counter.
    assert ("skipped 1 note" in out) if field == "dur" else ("no ProfilerStep" in out)


# ------------------------------------------------------------------ nccl-tests options


@pytest.mark.parametrize("factor, says", [
    ("nan", "finite number > 1, got nan"), ("inf", "finite number > 1, got inf"),
    ("1", "finite number > 1, got 1"), ("1.0000001", "166,355,332 sizes"),
])
def test_nccl_tests_step_factor(rejects, factor, says):
    assert says in rejects("nccl-tests", "--cluster", "dgx-a100", "-f", factor, names="-f:")


def test_nccl_tests_size_count_closed_form():
    # -b 1 -e 2^k -f 2 gives k + 1 sizes; the bound counts the same way.
    assert len(size_series(1, 2**20, 2.0)) == 21
    assert len(size_series(8, 8, 2.0)) == 1
    factor = 2 ** (1 / (MAX_SIZES - 1))
    assert len(size_series(1, 2.0 - 1e-9, factor)) <= MAX_SIZES
    with pytest.raises(ConfigError, match="sizes, more than"):
        size_series(1, 2**40, 1.001)


def test_nodes_bound(rejects):
    rejects("nccl-tests", "--cluster", "dgx-a100", "--nodes", "100000",
            names="--nodes: must be at most 16,384, got 100000")


@pytest.mark.parametrize("field, value", [
    ("cat", '{"a": 1}'), ("cat", "[1]"), ("name", "[1]"), ("tid", "[1]"), ("args", "[1]"),
    ("ts", '"1"'), ("dur", "-1"), ("ph", '{"X": 1}'),
])
def test_trace_events_with_fields_of_the_wrong_type_are_skipped(capsys, tmp_path, field,
                                                                  value):
    # (found by the fuzz suite: a 'cat' object was looked up in a set: unhashable)
    from distsim_gpu.scenarios.cli.main import main
    text = ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 5, '
            '"pid": 0, "tid": 7, "args": {"device": 0, "stream": 7}}]}')
    text = text.replace(f'"{field}": ', f'"{field}": {value}, "was": ', 1)
    path = tmp_path / "rank0.json"
    path.write_text(text)
    assert main(["trace", "summary", str(path)]) in (0, 2)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("old, new", [
    ("nGpus 8", "nGpus " + BIG), ("nThread 1", "nThread " + BIG),
    ("nccl-library=22807", "nccl-library=" + BIG), ("Rank  3", "Rank  " + BIG),
    ("1048576 262144", BIG + " 262144"), ("-1 20.51", "-" + BIG + " 20.51"),
    ("1048576 262144", "１０４８５７６ 262144"),
])
def test_nccl_log_huge_and_non_ascii_counts(old, new):
    # (int() of 5,000 digits raised ValueError in the header and row readers)
    from distsim_gpu.measured.nccl_log import parse_nccl_log

    from tests.fuzz.cases import NCCL_LOG
    text = NCCL_LOG.replace(old, new, 1)
    assert text != NCCL_LOG
    try:
        log = parse_nccl_log(text)
    except ParseError as error:
        assert len(str(error)) < 400
    else:
        assert log.num_ranks in (7, 8) and len(log.rows) >= 1


def test_merged_keys_may_be_overridden():
    data, _ = load_yaml_text("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\n", "c.yaml")
    assert data["d"] == {"x": 3, "y": 2}


def test_an_exponent_without_a_dot_is_text_and_its_error_says_how_to_write_it():
    """YAML 1.1 reads 1e9 and 2e0 as text (a bandwidth's guard against bare numbers relies
    on it: '4e11' needs its unit); a number key given one says what YAML reads instead."""
    from distsim_gpu.scenarios.scenario import load_scenario
    from distsim_gpu.simcore.config import parse_assignment

    data, _ = load_yaml_text("a: 1e9\nb: 2.0e+0\n", "c.yaml")
    assert data == {"a": "1e9", "b": 2.0}
    with pytest.raises(ConfigError, match=re.escape(
            "compute.matmul_efficiency: must be a number, got '7e-1' (YAML reads "
            "7e-1 as text, not a number: write 0.7 or 7.0e-1)")):
        load_scenario(QUICKSTART, [parse_assignment("compute.matmul_efficiency=7e-1")])


def test_base_60_scalars_stay_text():
    # YAML 1.1 read 1:2:3 as 3723 (3,723 nodes built) and an unquoted 2:1 ratio as 121.
    data, _ = load_yaml_text("nodes: 1:2:3\nratio: 2:1\nt: 1:30.5\nn: 1_000\n", "c.yaml")
    assert data == {"nodes": "1:2:3", "ratio": "2:1", "t": "1:30.5", "n": 1000}


def test_goodput_without_any_mtbf_is_an_error(rejects, tmp_path):
    # (found by the fuzz suite: no component failing made the failure draws NaN)
    text = Path(QUICKSTART).read_text() + "goodput: {mtbf: {}, restart: 10 min}\n"
    path = tmp_path / "g.yaml"
    path.write_text(text)
    rejects("run", str(path), names="goodput.mtbf: needs the MTBF of at least one component")


def test_trace_gzip_bomb_of_one_value_is_refused(monkeypatch, tmp_path, rejects):
    # A small .gz inflating to one endless string: the window would grow without bound.
    import gzip

    import distsim_gpu.measured.jsonstream as jsonstream
    monkeypatch.setattr(jsonstream, "MAX_VALUE_CHARS", 1 << 20)
    path = tmp_path / "rank0.json.gz"
    with gzip.open(path, "wt") as handle:
        handle.write('{"traceEvents": [{"name": "' + "a" * (3 << 20) + '"}]}')
    assert path.stat().st_size < 100_000
    rejects("trace", "summary", str(path), names="one JSON value is longer than 1 Mi")
