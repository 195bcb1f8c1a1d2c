"""The one trace loader: files, .json.gz, tar archives and folders; each document read in
its own format (Kineto, or distsim's own trace.json by ``otherData.generator``); every
unusable input a ParseError naming the file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from distsim_gpu.measured.distsim_trace import parse_distsim_trace
from distsim_gpu.measured.kineto import parse_trace
from distsim_gpu.measured.traces import (
    load_trace_file,
    load_traces,
    read_trace_file,
    read_traces,
)
from distsim_gpu.simcore.errors import ParseError


@pytest.fixture
def kineto_document(kineto_event):
    """A one-rank Kineto trace: a step, a GEMM and an all-reduce with its launch."""
    return {"traceEvents": [
        kineto_event("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        kineto_event("gemm", 0, 400),
        kineto_event("ncclKernel_AllReduce_RING_LL_Sum_float", 450, 250, correlation=5),
        kineto_event("cudaLaunchKernel", 10, 5, cat="cuda_runtime", correlation=5)],
        "distributedInfo": {"rank": 5, "world_size": 8}}


def _error(paths) -> str:
    with pytest.raises(ParseError) as info:
        load_traces(paths)
    return str(info.value)


# --- which format --------------------------------------------------------------------------

def test_a_folder_of_both_formats_reads_each_in_its_own(tmp_path, write_json,
                                                        kineto_document, distsim_document):
    simulated = distsim_document(gpus=2)
    write_json(tmp_path / "a_trace.json", simulated)
    write_json(tmp_path / "b_rank5.json.gz", kineto_document)
    reads = list(read_traces([tmp_path]))
    assert [(Path(r.source).name, r.format) for r in reads] == [
        ("a_trace.json", "distsim"), ("b_rank5.json.gz", "kineto")]
    distsim, kineto = reads
    assert distsim.simulated is not None and kineto.simulated is None
    assert list(distsim.rank_traces) == parse_distsim_trace(
        simulated, distsim.source).rank_traces()
    assert kineto.rank_traces == (parse_trace(kineto_document, kineto.source),)
    traces = load_traces([tmp_path])
    assert [t.rank for t in traces] == [0, 1, 5]
    assert [t.source.rsplit(":", 1)[-1] for t in traces[:2]] == ["gpu0", "gpu1"]
    assert [e.collective for e in traces[0].gpu_events] == [None, "all_reduce"]


def test_an_unknown_generator_is_read_as_a_kineto_trace(tmp_path, write_json,
                                                        kineto_document):
    # Only distsim marks its traces; any other Chrome trace is read for what Kineto-shaped
    # events it has.
    path = write_json(tmp_path / "other.json",
                      {**kineto_document, "otherData": {"generator": "other-tool"}})
    (read,) = read_traces([path])
    assert read.format == "kineto" and read.simulated is None
    assert read.rank_traces == (parse_trace(kineto_document, str(path)),)
    path = write_json(tmp_path / "odd.json", {**kineto_document, "otherData": ["distsim"]})
    assert next(read_traces([path])).format == "kineto"


def test_a_distsim_generator_without_run_metadata_is_an_error(tmp_path, write_json,
                                                              distsim_document):
    document = distsim_document()
    del document["otherData"]["distsim"]
    message = _error([write_json(tmp_path / "trace.json", document)])
    assert "trace.json" in message and "otherData.distsim" in message


def test_a_tar_with_both_formats(tmp_path, write_tar, kineto_document, distsim_document):
    tar = write_tar(tmp_path / "both.tar.gz", {
        "run/worker5.json.gz": gzip.compress(json.dumps(kineto_document).encode()),
        "run/sim/trace.json": json.dumps(distsim_document(gpus=3)).encode()})
    reads = list(read_traces([tar]))
    assert [(r.source, r.format) for r in reads] == [
        (f"{tar}:run/sim/trace.json", "distsim"), (f"{tar}:run/worker5.json.gz", "kineto")]
    assert [t.rank for t in load_traces([tar])] == [0, 1, 2, 5]


def test_read_trace_file_returns_the_distsim_spans_only_for_a_distsim_trace(
        tmp_path, write_json, kineto_document, distsim_document):
    traces, simulated = read_trace_file(write_json(tmp_path / "t.json", distsim_document()))
    assert len(traces) == 2 and simulated is not None
    assert {s.args.get("layer") for s in simulated.spans} == {"attention", None}
    traces, simulated = read_trace_file(write_json(tmp_path / "k.json", kineto_document))
    assert [t.rank for t in traces] == [5] and simulated is None


def test_load_trace_file_reads_one_gpu_and_points_many_to_load_traces(
        tmp_path, write_json, kineto_document, distsim_document):
    assert load_trace_file(write_json(tmp_path / "k.json", kineto_document)).rank == 5
    one = load_trace_file(write_json(tmp_path / "one.json", distsim_document(gpus=1)))
    assert one.rank == 0 and one.steps[0].duration_s == 1e-3
    with pytest.raises(ParseError, match=r"holds 2 GPUs.*load_traces"):
        load_trace_file(write_json(tmp_path / "two.json", distsim_document(gpus=2)))


# --- files, archives, folders --------------------------------------------------------------

def test_tar_and_directory_inputs_come_in_name_order(tmp_path, write_tar):
    doc = json.dumps({"traceEvents": []}).encode()
    tar = write_tar(tmp_path / "ranks.tar.gz", {"w/worker1.json.gz": gzip.compress(doc),
                                                "w/worker0.json": doc, "w/README": b"hi"})
    assert [t.rank for t in load_traces([tar])] == [0, 1]
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "rank-3.json.gz").write_bytes(gzip.compress(doc))
    (folder / "rank-2.json").write_bytes(doc)
    (folder / "notes.txt").write_text("x")
    assert [t.rank for t in load_traces([folder, tar])] == [2, 3, 0, 1]


def test_not_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"traceEvents": [1, 2,,]}')
    message = _error([path])
    assert str(path) in message and "not valid JSON" in message


def test_truncated_gzip(tmp_path, kineto_event):
    blob = gzip.compress(json.dumps({"traceEvents": [kineto_event("k", 0, 1)] * 200}).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(blob[: len(blob) // 2])
    message = _error([path])
    assert str(path) in message and "truncated" in message


def test_empty_file(tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    assert "empty file" in _error([path])
    gz = tmp_path / "empty.json.gz"
    gz.write_bytes(gzip.compress(b""))
    assert "empty file" in _error([gz])


def test_no_trace_events(tmp_path, write_json):
    path = write_json(tmp_path / "x.json", {"schemaVersion": 1})
    message = _error([path])
    assert str(path) in message and "traceEvents" in message
    assert "traceEvents" in _error([write_json(tmp_path / "y.json", {"traceEvents": {}})])
    assert "JSON object" in _error([write_json(tmp_path / "z.json", [1, 2])])


def test_tar_with_parent_member_is_rejected(tmp_path, write_tar):
    good = json.dumps({"traceEvents": []}).encode()
    path = write_tar(tmp_path / "evil.tar.gz", {"ok/rank0.json": good, "../evil.json": good})
    message = _error([path])
    assert "unsafe member name '../evil.json'" in message
    assert not (tmp_path.parent / "evil.json").exists()
    assert "unsafe" in _error([write_tar(tmp_path / "abs.tar.gz", {"/etc/evil.json": good})])


def test_tar_member_errors_name_the_member(tmp_path, write_tar):
    path = write_tar(tmp_path / "t.tar.gz", {"worker0.json": b'{"traceEvents": []}',
                                             "worker1.json": b"{nope",
                                             "worker2.json": b""})
    assert f"{path}:worker1.json" in _error([path])
    empty = write_tar(tmp_path / "e.tar.gz", {"worker2.json": b""})
    message = _error([empty])
    assert f"{empty}:worker2.json" in message and "empty file" in message


def test_archives_and_folders_without_traces(tmp_path, write_tar):
    empty = tmp_path / "nothing"
    empty.mkdir()
    assert "no *.json" in _error([empty])
    assert "no *.json" in _error([write_tar(tmp_path / "n.tar.gz", {"README": b"hi"})])
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not a tar at all")
    assert "not a readable tar archive" in _error([broken])


def test_a_chakra_et_is_named_and_sent_to_trace_chakra(tmp_path, write_json):
    """A Chakra ET, binary or JSON, is named as one with the command that runs it; the
    binary one had said "not UTF-8 text", the JSON one "no 'traceEvents' list"."""
    binary = tmp_path / "job.0.et"
    binary.write_bytes(b"\x0a\x07\x0a\x051.0.1\xff\xfe")
    message = _error([binary])
    assert "a Chakra execution trace (.et)" in message and "distsim trace chakra" in message
    as_json = write_json(tmp_path / "job.0.json", {"workload_graph": [], "ngpus": 8})
    message = _error([as_json])
    assert "a Chakra execution trace (its JSON form)" in message
    assert "distsim trace chakra" in message


def test_missing_path(tmp_path):
    message = _error([tmp_path / "absent.json"])
    assert "absent.json" in message and "no such file" in message


@pytest.mark.parametrize("slowdown", [0, -1.5, "fast", True])
def test_a_rank_groups_slowdown_must_be_a_positive_number(distsim_document, slowdown):
    document = distsim_document()
    document["otherData"]["distsim"]["groups"]["stage 0"]["slowdown"] = slowdown
    with pytest.raises(ParseError) as info:
        parse_distsim_trace(document, "trace.json")
    assert str(info.value) == ("trace.json: otherData.distsim.groups.stage 0.slowdown: must be "
                               f"a finite number > 0, got {slowdown!r}")


def test_a_faster_member_runs_its_share_of_each_compute_span_and_waits_the_rest(
        distsim_document):
    """gpu0 at 0.8 of gpu1's pace: its 0.4 ms layer takes 0.32 ms, then it waits 0.08 ms
    for gpu1 (communication, no kernel launched); gpu1 reads as the group."""
    document = distsim_document()
    document["otherData"]["distsim"]["groups"]["stage 0"]["paces"] = [0.8, 1.0]
    fast, slow = parse_distsim_trace(document, "trace.json").rank_traces()
    layer, wait, reduce = fast.gpu_events
    assert (layer.kind, layer.start_s, layer.duration_s) == ("compute", 0.0, pytest.approx(
        3.2e-4, rel=1e-12))
    assert (wait.name, wait.kind, wait.collective) == ("wait for gpu1", "communication", None)
    assert wait.start_s + wait.duration_s == pytest.approx(4e-4, rel=1e-12)
    assert layer.start_s + layer.duration_s == wait.start_s
    assert (reduce.collective, reduce.start_s) == ("all_reduce", pytest.approx(4e-4))
    assert fast.nccl_counts() == slow.nccl_counts() == {"all_reduce": 1}
    assert [e.duration_s for e in slow.gpu_events] == pytest.approx([4e-4, 2e-4], rel=1e-12)


@pytest.mark.parametrize("paces", [[0.8], [0.8, 1.2], [0, 1.0], "fast", [True, 1.0]])
def test_a_rank_groups_paces_are_one_share_in_0_1_per_gpu(distsim_document, paces):
    document = distsim_document()
    document["otherData"]["distsim"]["groups"]["stage 0"]["paces"] = paces
    with pytest.raises(ParseError) as info:
        parse_distsim_trace(document, "trace.json")
    assert info.value.key == "otherData.distsim.groups.stage 0.paces"
    assert "one share per GPU (2)" in str(info.value) or "a number in (0, 1]" in str(info.value)
