"""Per-rank, per-step breakdown of read traces: invariants on the real corpus, exact
numbers on a small trace, the table and JSON forms and ``distsim trace summary``."""

from __future__ import annotations

import json

import pytest
from distsim_gpu.measured.kineto import parse_trace
from distsim_gpu.measured.summary import format_summary_table, summarise, to_json
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.fit.calibrate_trace import measured_compute_s
from distsim_gpu.simcore.errors import ConfigError


def test_summary_invariants_on_every_real_file(kineto_corpus):
    for name, traces in kineto_corpus.traces.items():
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


def test_nccl_counts_per_step_add_up_for_nccl_data(kineto_corpus):
    rows = summarise(kineto_corpus.traces[kineto_corpus.nccl_data])
    assert [dict(r.nccl_counts) for r in rows] == [{"all_reduce": 5, "broadcast": 2}] * 3


def test_table_and_json_forms(kineto_corpus):
    traces = kineto_corpus.traces[kineto_corpus.dlrm]
    rows = summarise(traces)
    table = format_summary_table(traces, rows)
    assert table.startswith("# 8 rank(s), 1 profiler step(s) (8 rows: a rank's step each); "
                            "times in ms")
    assert "all_reducex3 sendrecvx5" in table
    data = json.loads(json.dumps(to_json(traces, rows)))
    assert [r["rank"] for r in data["ranks"]] == list(range(8))
    assert data["ranks"][0]["steps"][0]["step"] == 10


def test_small_trace_is_summarised_exactly(kineto_event):
    events = [
        kineto_event("ProfilerStep#1", 0.0, 1000.0, cat="user_annotation"),
        kineto_event("gemm", 0.0, 400.0),
        kineto_event("gemm2", 300.0, 200.0),  # overlaps gemm: compute union 0..500
        kineto_event("ncclKernel_AllReduce_RING_LL_Sum_float", 450.0, 250.0, correlation=5),
        kineto_event("Memcpy HtoD", 800.0, 100.0, cat="gpu_memcpy"),
        kineto_event("late", 950.0, 200.0),  # clipped to the window: 50 µs
        kineto_event("cudaLaunchKernel", 10.0, 5.0, cat="cuda_runtime", correlation=5),
    ]
    trace = parse_trace({"traceEvents": events}, "rank-1.json")
    (row,) = summarise([trace])
    assert row.rank == 1
    assert row.step_s == pytest.approx(1e-3)
    assert row.compute_s == pytest.approx(550e-6)
    assert row.communication_s == pytest.approx(250e-6)
    assert row.memcpy_s == pytest.approx(100e-6)
    assert row.busy_s == pytest.approx(850e-6)
    assert row.idle_s == pytest.approx(150e-6)
    assert row.overlap_s == pytest.approx(50e-6)
    assert dict(row.nccl_counts) == {"all_reduce": 1}


def test_deepep_kernels_are_communication(kineto_event):
    """DeepEP's dispatch and combine kernels (DeepSeek's ``dpsk::ep::`` build, the released
    ``deep_ep::``) move tokens between GPUs: they count as communication, not compute, and
    overlap the GEMM they run beside; they had counted as compute (DeepSeek's own trace
    read as 0 ms of communication). Only NCCL kernels are counted per collective."""
    events = [
        kineto_event("ProfilerStep#1", 0.0, 1000.0, cat="user_annotation"),
        kineto_event("gemm", 0.0, 400.0),
        kineto_event("void dpsk::ep::internode::dispatch<false, 8>(int4*, float*)", 300.0,
                     300.0),
        kineto_event("void deep_ep::intranode::combine<8>(int)", 700.0, 100.0),
    ]
    (row,) = summarise([parse_trace({"traceEvents": events}, "rank-0.json")])
    assert row.compute_s == pytest.approx(400e-6)
    assert row.communication_s == pytest.approx(400e-6)
    assert row.overlap_s == pytest.approx(100e-6)
    assert row.idle_s == pytest.approx(1e-3 - 700e-6)
    assert row.nccl_counts == ()


def test_trace_without_profiler_steps_is_one_whole_window(kineto_event):
    """A trace recorded without a schedule (no ``ProfilerStep#N``) reads as one window from
    its first GPU event to its last, step None, labelled 'all' in the table; it had printed
    a table with no rows. Compute-efficiency fitting still refuses it: the span may hold
    several steps."""
    events = [
        kineto_event("gemm", 100.0, 300.0),
        kineto_event("ncclKernel_AllReduce_RING_LL_Sum_float", 350.0, 150.0),
        kineto_event("Memcpy DtoH", 700.0, 100.0, cat="gpu_memcpy"),
    ]
    trace = parse_trace({"traceEvents": events}, "rank-0.json")
    (row,) = summarise([trace])
    assert row.step is None
    assert row.start_s == pytest.approx(100e-6)
    assert row.step_s == pytest.approx(700e-6)
    assert row.compute_s == pytest.approx(300e-6)
    assert row.communication_s == pytest.approx(150e-6)
    assert row.overlap_s == pytest.approx(50e-6)
    assert row.idle_s == pytest.approx(700e-6 - 500e-6)
    table = format_summary_table([trace], [row])
    assert table.startswith("# 1 rank(s), 0 profiler step(s) (1 rows")
    assert "no ProfilerStep annotations: one row, step 'all'" in table
    assert table.splitlines()[-1].split()[:3] == ["0", "all", "0.700"]
    assert to_json([trace], [row])["ranks"][0]["steps"][0]["step"] is None
    with pytest.raises(ConfigError, match="no profiler steps"):
        measured_compute_s([trace])


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
