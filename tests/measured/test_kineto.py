"""Kineto (PyTorch profiler) trace import and per-step summary, on the real corpus.

The expected numbers are those /work/shared/data/traces/SOURCES.txt states for each file.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
from distsim_gpu.measured.kineto import RankTrace, collective_kind, load_traces
from distsim_gpu.measured.summary import (
    format_summary_table,
    intersection_length,
    summarise,
    to_json,
    union,
)
from distsim_gpu.scenarios.cli import main
from distsim_gpu.simcore.errors import ParseError

# Files of the trace corpus (the ``trace_corpus`` fixture), relative to its root.
HTA = "HolisticTraceAnalysis/tests/data/"
DLRM = "param/et_replay/tests/inputs/dlrm_kineto.tar.gz"

# file -> (ranks in file, world size, GPU model, profiler steps, NCCL kernels per kind)
EXPECTED = {
    DLRM: (list(range(8)), 8, "Tesla V100-SXM2-32GB", 1, {"sendrecv": 5, "all_reduce": 3}),
    HTA + "nccl_parser_config/nccl_data.json.gz":
        ([0], 2, "NVIDIA A100-PG509-200", 3, {"all_reduce": 15, "broadcast": 6}),
    HTA + "trace_diff/control/control.json.gz":
        ([3], 8, "NVIDIA A100-PG509-200", 6, {"sendrecv": 42, "all_reduce": 18}),
    HTA + "trace_diff/test/test.json.gz":
        ([1], 2, "Tesla V100-SXM2-16GB", 6, {"sendrecv": 43, "all_reduce": 21}),
    HTA + "negative_queue_length_values_check/rank0.json.gz":
        ([0], 16, "NVIDIA A100-SXM4-80GB", 5, {"sendrecv": 80}),
    HTA + "trace_filter/sampled_rank-0.json.gz": ([0], 128, None, 2, {"sendrecv": 10}),
    HTA + "trace_filter/sampled_rank-1.json.gz": ([1], 128, None, 2, {"sendrecv": 10}),
    HTA + "df_index_resolver/df_index_resolver.json.gz":
        ([1], 2, "Tesla V100-SXM2-32GB", 5, {"all_reduce": 2020}),
}

# DDP gradient buckets of the ResNet-50 run in nccl_data (floats), as SOURCES.txt lists.
NCCL_DATA_BUCKETS = {6637568, 2431040, 2049000, 7875584, 6563840}


@pytest.fixture(scope="module")
def corpus(trace_corpus) -> dict[str, list[RankTrace]]:
    return {name: load_traces([trace_corpus.root / name]) for name in EXPECTED}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file_reads_as_sources_txt_states(corpus, name):
    ranks, world, gpu, num_steps, nccl = EXPECTED[name]
    traces = corpus[name]
    assert [t.rank for t in traces] == ranks
    for trace in traces:
        assert trace.world_size == world
        assert trace.gpu_model == gpu
        assert len(trace.steps) == num_steps
        assert trace.nccl_counts() == dict(sorted(nccl.items()))
        assert trace.skipped == ()
        assert all(k.kind == "communication" for k in trace.kernels if k.collective)


def test_profiler_step_times_are_seconds(corpus):
    (trace,) = corpus[HTA + "nccl_parser_config/nccl_data.json.gz"]
    assert [s.number for s in trace.steps] == [4, 5, 6]
    assert [round(s.duration_s * 1e3, 1) for s in trace.steps] == [222.4, 219.7, 224.9]
    dlrm = corpus[DLRM]
    assert all(12.5 <= round(t.steps[0].duration_s * 1e3, 1) <= 19.9 for t in dlrm)


def test_nccl_kernel_args_give_message_size_and_group(corpus):
    (trace,) = corpus[HTA + "nccl_parser_config/nccl_data.json.gz"]
    all_reduce = [k for k in trace.kernels if k.collective == "all_reduce"]
    assert {k.in_nelems for k in all_reduce} == NCCL_DATA_BUCKETS
    biggest = max(all_reduce, key=lambda k: k.in_nelems or 0)
    assert biggest.dtype == "Float"
    assert biggest.message_bytes == 7875584 * 4
    assert biggest.group_size == 2
    assert biggest.group_ranks == (0, 1)
    assert biggest.stream is not None and biggest.device == 0


def test_nccl_annotation_gives_size_and_operation_where_kernel_args_do_not(corpus):
    # DLRM's kernels carry no size args; each launch sits in a ``nccl:<op>`` scope whose
    # recorded input (shape × dtype) is the message, and whose name says that the
    # SendRecv kernels implement all_to_all.
    for trace in corpus[DLRM]:
        comm = [k for k in trace.kernels if k.kind == "communication"]
        assert sorted((k.comm_op, k.message_bytes) for k in comm) == sorted([
            ("all_reduce", 394241 * 4), ("all_reduce", 112 * 4), ("all_reduce", 226960 * 4),
            ("all_to_all", 6144 * 4), ("all_to_all", 6144 * 4), ("all_to_all", 24 * 8),
            ("all_to_all", 384 * 4), ("all_to_all", 3392 * 4)])
        assert {k.collective for k in comm if k.comm_op == "all_to_all"} == {"sendrecv"}


def test_cpu_events_keep_threads_launch_links_and_autograd_sequence(corpus):
    (trace,) = corpus[HTA + "nccl_parser_config/nccl_data.json.gz"]
    runtime = [e for e in trace.cpu_events if e.category == "cuda_runtime"]
    assert len(runtime) == 8740
    correlations = {e.correlation for e in runtime}
    launched = [k for k in trace.kernels if k.correlation is not None]
    assert launched and all(k.correlation in correlations for k in launched)
    assert sum(e.name == "cudaEventSynchronize" for e in runtime) == 24
    assert sum(e.sequence is not None for e in trace.cpu_events if e.category == "cpu_op") == 2286
    starts = [e.start_s for e in trace.cpu_events]
    assert starts == sorted(starts)


def test_memcpy_and_memset_are_gpu_events_of_their_own_kind(corpus):
    (trace,) = corpus[HTA + "nccl_parser_config/nccl_data.json.gz"]
    kinds = {k.kind for k in trace.kernels}
    assert kinds == {"compute", "communication", "memcpy", "memset"}


def test_summary_invariants_on_every_real_file(corpus):
    for name, traces in corpus.items():
        rows = summarise(traces)
        assert len(rows) == sum(len(t.steps) for t in traces), name
        for row in rows:
            eps = 1e-9
            for busy in (row.compute_s, row.communication_s, row.memcpy_s, row.busy_s):
                assert 0.0 <= busy <= row.step_s + eps, (name, row)
            assert row.idle_s >= 0.0
            assert row.idle_s == pytest.approx(row.step_s - row.busy_s, abs=eps)
            assert row.overlap_s <= min(row.compute_s, row.communication_s) + eps
            assert row.busy_s <= row.compute_s + row.communication_s + row.memcpy_s + eps


def test_nccl_counts_per_step_add_up_for_nccl_data(corpus):
    rows = summarise(corpus[HTA + "nccl_parser_config/nccl_data.json.gz"])
    assert [dict(r.nccl_counts) for r in rows] == [{"all_reduce": 5, "broadcast": 2}] * 3


def test_table_and_json_forms(corpus):
    traces = corpus[DLRM]
    rows = summarise(traces)
    table = format_summary_table(traces, rows)
    assert table.startswith("# 8 rank(s), 8 profiler step(s); times in ms")
    assert "all_reducex3 sendrecvx5" in table
    data = json.loads(json.dumps(to_json(traces, rows)))
    assert [r["rank"] for r in data["ranks"]] == list(range(8))
    assert data["ranks"][0]["steps"][0]["step"] == 10


def test_interval_helpers():
    a = union([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (4.0, 4.0)])
    assert a == [(0.0, 3.0), (5.0, 6.0)]
    assert intersection_length(a, union([(2.5, 5.5)])) == pytest.approx(1.0)


@pytest.mark.parametrize(("name", "kind"), [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     "all_reduce"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "sendrecv"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
    ("ncclKernel_ReduceScatter_RING_SIMPLE_Sum_bf16", "reduce_scatter"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "broadcast"),
    ("ncclKernel_Reduce_RING_LL_Sum_half", "reduce"),
])
def test_collective_kind_from_kernel_name(name, kind):
    assert collective_kind(name) == kind


# --- synthetic and malformed inputs -------------------------------------------------------

def _event(name, ts, dur, cat="kernel", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"stream": 7, "device": 0, **args}}


def _doc(events, **extra):
    return {"traceEvents": events, **extra}


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_small_trace_is_summarised_exactly(tmp_path):
    events = [
        _event("ProfilerStep#1", 0.0, 1000.0, cat="user_annotation"),
        _event("gemm", 0.0, 400.0),
        _event("gemm2", 300.0, 200.0),  # overlaps gemm: compute union 0..500
        _event("ncclKernel_AllReduce_RING_LL_Sum_float", 450.0, 250.0, correlation=5),
        _event("Memcpy HtoD", 800.0, 100.0, cat="gpu_memcpy"),
        _event("late", 950.0, 200.0),  # clipped to the window: 50 µs
        _event("cudaLaunchKernel", 10.0, 5.0, cat="cuda_runtime", correlation=5),
    ]
    path = _write(tmp_path / "rank-1.json", _doc(events))
    (trace,) = load_traces([path])
    assert trace.rank == 1 and trace.world_size is None and trace.gpu_model is None
    (row,) = summarise([trace])
    assert row.step_s == pytest.approx(1e-3)
    assert row.compute_s == pytest.approx(550e-6)
    assert row.communication_s == pytest.approx(250e-6)
    assert row.memcpy_s == pytest.approx(100e-6)
    assert row.busy_s == pytest.approx(850e-6)
    assert row.idle_s == pytest.approx(150e-6)
    assert row.overlap_s == pytest.approx(50e-6)
    assert dict(row.nccl_counts) == {"all_reduce": 1}
    nccl = next(k for k in trace.kernels if k.collective)
    assert nccl.launch_s == pytest.approx(10e-6)


def test_bad_events_are_skipped_and_listed(tmp_path):
    events = [
        _event("ProfilerStep#3", 0, 100, cat="user_annotation"),
        _event("gemm", 10, 20),
        _event("broken", "soon", 20),
        _event("broken_dur", 10, None),
        {"ph": "Z", "name": "weird"},
        "not an event",
    ]
    (trace,) = load_traces([_write(tmp_path / "t.json", _doc(events))])
    assert [k.name for k in trace.kernels] == ["gemm"]
    assert len(trace.steps) == 1
    assert len(trace.skipped) == 4
    assert any("'broken'" in s and "ts is not a number" in s for s in trace.skipped)
    assert any("dur" in s and "broken_dur" in s for s in trace.skipped)
    assert any("unknown phase 'Z'" in s for s in trace.skipped)


def _error(paths) -> str:
    with pytest.raises(ParseError) as info:
        load_traces(paths)
    return str(info.value)


def test_not_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"traceEvents": [1, 2,,]}')
    message = _error([path])
    assert str(path) in message and "not valid JSON" in message


def test_truncated_gzip(tmp_path):
    blob = gzip.compress(json.dumps(_doc([_event("k", 0, 1)] * 200)).encode())
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


def test_no_trace_events(tmp_path):
    path = _write(tmp_path / "x.json", {"schemaVersion": 1})
    message = _error([path])
    assert str(path) in message and "traceEvents" in message
    assert "traceEvents" in _error([_write(tmp_path / "y.json", {"traceEvents": {}})])
    assert "JSON object" in _error([_write(tmp_path / "z.json", [1, 2])])


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, blob in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            archive.addfile(info, io.BytesIO(blob))
    return path


def test_tar_with_parent_member_is_rejected(tmp_path):
    good = json.dumps(_doc([])).encode()
    path = _tar(tmp_path / "evil.tar.gz", {"ok/rank0.json": good, "../evil.json": good})
    message = _error([path])
    assert "unsafe member name '../evil.json'" in message
    assert not (tmp_path.parent / "evil.json").exists()
    assert "unsafe" in _error([_tar(tmp_path / "abs.tar.gz", {"/etc/evil.json": good})])


def test_tar_member_errors_name_the_member(tmp_path):
    path = _tar(tmp_path / "t.tar.gz", {"worker0.json": json.dumps(_doc([])).encode(),
                                        "worker1.json": b"{nope"})
    message = _error([path])
    assert f"{path}:worker1.json" in message


def test_tar_and_directory_inputs(tmp_path):
    doc = json.dumps(_doc([_event("ProfilerStep#1", 0, 10, cat="user_annotation")])).encode()
    tar = _tar(tmp_path / "ranks.tar.gz", {"w/worker1.json.gz": gzip.compress(doc),
                                           "w/worker0.json": doc, "w/README": b"hi"})
    assert [t.rank for t in load_traces([tar])] == [0, 1]
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "rank-2.json").write_bytes(doc)
    (folder / "rank-3.json.gz").write_bytes(gzip.compress(doc))
    (folder / "notes.txt").write_text("x")
    assert [t.rank for t in load_traces([folder])] == [2, 3]
    empty = tmp_path / "nothing"
    empty.mkdir()
    assert "no *.json" in _error([empty])


def test_missing_path(tmp_path):
    message = _error([tmp_path / "absent.json"])
    assert "absent.json" in message and "no such file" in message


# --- command line --------------------------------------------------------------------------

def test_cli_trace_summary_on_dlrm(trace_corpus, capsys):
    assert main(["trace", "summary", str(trace_corpus.dlrm)]) == 0
    out = capsys.readouterr().out
    assert "# 8 rank(s)" in out
    assert sum(1 for line in out.splitlines() if line.startswith("# rank ")) == 8
    assert main(["trace", "summary", str(trace_corpus.dlrm), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["ranks"]) == 8
    assert all(r["nccl_counts"] == {"all_reduce": 3, "sendrecv": 5} for r in data["ranks"])


def test_cli_trace_summary_error_exits_2(tmp_path, capsys):
    assert main(["trace", "summary", str(tmp_path / "absent.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("distsim: error: ") and "absent.json" in err
