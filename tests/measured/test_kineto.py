"""Kineto (PyTorch profiler) traces read into records: the real corpus, then small and
malformed documents."""

from __future__ import annotations

import pytest
from distsim_gpu.measured.kineto import KinetoReader, parse_trace
from distsim_gpu.simcore.errors import ParseError

# DDP gradient buckets of the ResNet-50 run in nccl_data (floats), as SOURCES.txt lists.
NCCL_DATA_BUCKETS = {6637568, 2431040, 2049000, 7875584, 6563840}


def test_corpus_files_read_as_sources_txt_states(kineto_corpus):
    for name, (ranks, world, gpu, num_steps, nccl) in kineto_corpus.expected.items():
        traces = kineto_corpus.traces[name]
        assert [t.rank for t in traces] == ranks, name
        for trace in traces:
            assert trace.world_size == world, name
            assert trace.gpu_model == gpu, name
            assert len(trace.steps) == num_steps, name
            assert trace.nccl_counts() == dict(sorted(nccl.items())), name
            assert trace.skipped == (), name
            assert all(e.kind == "communication" for e in trace.gpu_events if e.collective)


def test_profiler_step_times_are_seconds(kineto_corpus):
    (trace,) = kineto_corpus.traces[kineto_corpus.nccl_data]
    assert [s.number for s in trace.steps] == [4, 5, 6]
    assert [round(s.duration_s * 1e3, 1) for s in trace.steps] == [222.4, 219.7, 224.9]
    dlrm = kineto_corpus.traces[kineto_corpus.dlrm]
    assert all(12.5 <= round(t.steps[0].duration_s * 1e3, 1) <= 19.9 for t in dlrm)


def test_nccl_kernel_args_give_message_size_and_group(kineto_corpus):
    (trace,) = kineto_corpus.traces[kineto_corpus.nccl_data]
    all_reduce = [e for e in trace.gpu_events if e.collective == "all_reduce"]
    assert {e.in_nelems for e in all_reduce} == NCCL_DATA_BUCKETS
    biggest = max(all_reduce, key=lambda e: e.in_nelems or 0)
    assert biggest.dtype == "Float"
    assert biggest.message_bytes == 7875584 * 4
    assert biggest.group_size == 2
    assert biggest.group_ranks == (0, 1)
    assert biggest.stream is not None and biggest.device == 0


def test_nccl_annotation_gives_size_and_operation_where_kernel_args_do_not(kineto_corpus):
    # DLRM's kernels carry no size args; each launch sits in a ``nccl:<op>`` scope whose
    # recorded input (shape × dtype) is the message, and whose name says that the
    # SendRecv kernels implement all_to_all.
    for trace in kineto_corpus.traces[kineto_corpus.dlrm]:
        comm = [e for e in trace.gpu_events if e.kind == "communication"]
        assert sorted((e.comm_op, e.message_bytes) for e in comm) == sorted([
            ("all_reduce", 394241 * 4), ("all_reduce", 112 * 4), ("all_reduce", 226960 * 4),
            ("all_to_all", 6144 * 4), ("all_to_all", 6144 * 4), ("all_to_all", 24 * 8),
            ("all_to_all", 384 * 4), ("all_to_all", 3392 * 4)])
        assert {e.collective for e in comm if e.comm_op == "all_to_all"} == {"sendrecv"}


def test_cpu_events_keep_threads_launch_links_and_autograd_sequence(kineto_corpus):
    (trace,) = kineto_corpus.traces[kineto_corpus.nccl_data]
    runtime = [e for e in trace.cpu_events if e.category == "cuda_runtime"]
    assert len(runtime) == 8740
    correlations = {e.correlation for e in runtime}
    launched = [e for e in trace.gpu_events if e.correlation is not None]
    assert launched and all(e.correlation in correlations for e in launched)
    assert sum(e.name == "cudaEventSynchronize" for e in runtime) == 24
    assert sum(e.sequence is not None for e in trace.cpu_events if e.category == "cpu_op") == 2286
    starts = [e.start_s for e in trace.cpu_events]
    assert starts == sorted(starts)


def test_memcpy_and_memset_are_gpu_events_of_their_own_kind(kineto_corpus):
    (trace,) = kineto_corpus.traces[kineto_corpus.nccl_data]
    kinds = {e.kind for e in trace.gpu_events}
    assert kinds == {"compute", "communication", "memcpy", "memset"}


# --- small documents -----------------------------------------------------------------------

def test_launch_time_step_and_identity_of_a_small_document(kineto_event):
    events = [
        kineto_event("ProfilerStep#7", 0.0, 1000.0, cat="user_annotation"),
        kineto_event("ncclKernel_AllReduce_RING_LL_Sum_float", 450.0, 250.0, correlation=5,
                     dtype="float", **{"In msg nelems": 256, "Out msg nelems": 256,
                                       "Process Group Ranks": "[0, 1]"}),
        kineto_event("gemm", 0.0, 400.0),
        kineto_event("cudaLaunchKernel", 10.0, 5.0, cat="cuda_runtime", correlation=5),
    ]
    document = {"traceEvents": events, "distributedInfo": {"rank": 1, "world_size": 2},
                "deviceProperties": [{"name": "NVIDIA H100"}]}
    trace = parse_trace(document, "t.json")
    assert (trace.rank, trace.world_size, trace.gpu_model) == (1, 2, "NVIDIA H100")
    assert [(s.number, s.start_s, s.duration_s) for s in trace.steps] == [(7, 0.0, 1e-3)]
    assert [e.name for e in trace.gpu_events] == ["gemm", events[1]["name"]]
    nccl = trace.gpu_events[1]
    assert nccl.launch_s == pytest.approx(10e-6)
    assert (nccl.collective, nccl.message_bytes, nccl.group_ranks) == ("all_reduce", 1024,
                                                                      (0, 1))
    assert [e.name for e in trace.cpu_events] == ["cudaLaunchKernel"]


def test_an_nccl_dtype_of_unknown_width_is_said_not_passed_over(kineto_event):
    """A dtype the reader has no width for leaves the kernel's size unknown; the trace says
    so (it had been dropped silently), and a known one says nothing."""
    def read(dtype):
        kernel = kineto_event("ncclDevKernel_AllGather_RING_LL", 0.0, 5.0, dtype=dtype,
                              **{"In msg nelems": 64, "Out msg nelems": 128})
        return parse_trace({"traceEvents": [kernel]}, "t.json")

    (unknown,) = read("Float7_e3m3").gpu_events
    assert unknown.message_bytes is None
    (said,) = read("Float7_e3m3").skipped
    assert "'Float7_e3m3'" in said and "traceEvents[0]" in said
    assert read("Float8_e8m0fnu").gpu_events[0].message_bytes == 128  # (MX scales: 1 B)
    known = read("BFloat16")
    assert known.gpu_events[0].message_bytes == 256 and known.skipped == ()


@pytest.mark.parametrize(("source", "rank"), [
    ("worker3.json", 3), ("dir/rank-12.json.gz", 12), ("a.tar.gz:w/rank_2.json", 2),
    ("trace.json", None)])
def test_rank_comes_from_the_file_name_where_the_profiler_did_not_record_it(source, rank):
    assert parse_trace({"traceEvents": []}, source).rank == rank


def test_bad_events_are_skipped_and_listed(kineto_event):
    events = [
        kineto_event("ProfilerStep#3", 0, 100, cat="user_annotation"),
        kineto_event("gemm", 10, 20),
        kineto_event("broken", "soon", 20),
        kineto_event("broken_dur", 10, None),
        {"ph": "Z", "name": "weird"},
        "not an event",
    ]
    trace = parse_trace({"traceEvents": events}, "t.json")
    assert [e.name for e in trace.gpu_events] == ["gemm"]
    assert len(trace.steps) == 1
    assert len(trace.skipped) == 4
    assert any("'broken'" in s and "ts is not a number" in s for s in trace.skipped)
    assert any("dur" in s and "broken_dur" in s for s in trace.skipped)
    assert any("unknown phase 'Z'" in s for s in trace.skipped)
    assert any("traceEvents[5]: not an object" in s for s in trace.skipped)


def test_skip_notes_stop_at_twenty_then_count(kineto_event):
    trace = parse_trace({"traceEvents": [kineto_event("x", None, 1)] * 25}, "t.json")
    assert len(trace.skipped) == 21
    assert trace.skipped[-1] == "... and 5 more skipped events"


def test_streamed_events_give_the_same_record_as_a_decoded_document(kineto_event):
    events = [kineto_event("ProfilerStep#1", 0, 100, cat="user_annotation"),
              kineto_event("gemm", 10, 20), kineto_event("bad", "x", 1)]
    reader = KinetoReader("t.json")
    for index, event in enumerate(events):
        reader.add(index, event)
    document = {"traceEvents": [], "distributedInfo": {"rank": 4}}
    assert reader.finish(document) == parse_trace({**document, "traceEvents": events},
                                                  "t.json")


@pytest.mark.parametrize(("document", "says"), [
    ({"schemaVersion": 1}, "no 'traceEvents' list (missing)"),
    ({"traceEvents": {}}, "no 'traceEvents' list (a dict)"),
    ([1, 2], "expected a JSON object, found a list"),
])
def test_a_document_without_an_event_list_is_an_error_naming_the_source(document, says):
    with pytest.raises(ParseError) as info:
        parse_trace(document, "x.json")
    assert "x.json" in str(info.value) and says in str(info.value)
    with pytest.raises(ParseError, match=r"traceEvents|JSON object"):
        KinetoReader("x.json").finish(document)
