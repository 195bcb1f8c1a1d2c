"""The SimPy API (workloads.iteration.runtime) against closed forms on the synthetic
``switch`` cluster.

With ideal parameters a transfer costs exactly ``latency + bytes / bandwidth``; on
``switch`` every GPU-to-GPU hop crosses two links (GPU→switch→GPU), so α = 2·link latency
(as in tests/collectives/test_closed_forms.py).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import simpy
from distsim_gpu.collectives import CollectiveRecord, CommParams
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads import Cluster, KernelRecord, Stream
from distsim_gpu.workloads.specs.gpus import get_gpu

B = 50e9  # bytes/s per link direction
L = 1e-6  # seconds per link
ALPHA = 2 * L
DOCS = Path(__file__).resolve().parents[2] / "docs" / "simpy-api.md"


def switch_cluster(n: int = 4, *, latency: float = L, **options) -> Cluster:
    topology = build_cluster({"preset": "switch", "gpus": n, "link_bandwidth": B,
                              "link_latency": latency})
    return Cluster(topology, params=CommParams(protocol="simple").ideal(), **options)


def run(cluster: Cluster, process) -> float:
    cluster.process(process)
    return cluster.run()


# ---------------------------------------------------------------------- transfers


def test_one_send_is_latency_plus_bytes_over_bandwidth():
    cluster, size = switch_cluster(), 3e9
    call = cluster.send("n0.gpu0", cluster.gpus[3], size)
    cluster.run()
    assert isinstance(call.value, CollectiveRecord)
    assert call.value.duration_s == pytest.approx(ALPHA + size / B, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_matches_the_collectives_formula(n):
    cluster, size = switch_cluster(n), 2**28
    call = cluster.all_reduce(cluster.gpus, size, algorithm="ring")
    cluster.run()
    expected = 2 * (n - 1) / n * size / B + 2 * (n - 1) * ALPHA
    assert call.value.duration_s == pytest.approx(expected, rel=1e-12)
    assert call.value.algorithm == "ring"


@pytest.mark.parametrize(("method", "expected"), [
    ("all_gather", lambda n, s: (n - 1) / n * s / B + (n - 1) * ALPHA),
    ("reduce_scatter", lambda n, s: (n - 1) / n * s / B + (n - 1) * ALPHA),
    ("all_to_all", lambda n, s: (n - 1) / n * s / B + ALPHA),
    ("broadcast", lambda n, s: s / B + (n - 1) * ALPHA),
])
def test_other_collectives_match_their_formulas(method, expected):
    n, size = 8, 2**30
    cluster = switch_cluster(n)
    call = getattr(cluster, method)(cluster.gpus, size)
    cluster.run()
    assert call.value.duration_s == pytest.approx(expected(n, size), rel=1e-12)


def test_two_sends_over_one_shared_link_each_get_half_the_rate():
    # Both leave gpu0 over its one uplink: max-min gives each B/2 while both run; when
    # the smaller lands, the larger has the link to itself.  (stream=None: on gpu0's comm
    # stream they would run one after the other.)
    cluster, small, large = switch_cluster(), 1e9, 3e9
    first = cluster.send("n0.gpu0", "n0.gpu1", small, stream=None)
    second = cluster.send("n0.gpu0", "n0.gpu2", large, stream=None)
    cluster.run()
    assert first.value.end_s == pytest.approx(ALPHA + 2 * small / B, rel=1e-12)
    assert second.value.end_s == pytest.approx(ALPHA + (small + large) / B, rel=1e-12)


def test_sends_into_one_gpu_share_its_downlink_and_disjoint_ones_do_not():
    cluster, size = switch_cluster(), 2e9
    into_0 = [cluster.send(src, "n0.gpu0", size, stream=f"from {src}")
              for src in ("n0.gpu1", "n0.gpu2")]
    apart = cluster.send("n0.gpu3", "n0.gpu1", size)  # its links carry nothing else
    cluster.run()
    for call in into_0:
        assert call.value.duration_s == pytest.approx(ALPHA + 2 * size / B, rel=1e-12)
    assert apart.value.duration_s == pytest.approx(ALPHA + size / B, rel=1e-12)


def test_all_reduces_on_the_comm_stream_queue_and_on_other_streams_share_links():
    n, size = 4, 2**30
    alone = 2 * (n - 1) / n * size / B
    queued = switch_cluster(n, latency=0.0)
    calls = [queued.all_reduce(queued.gpus, size) for _ in range(2)]  # both on "comm"
    queued.run()
    assert [c.value.end_s for c in calls] == pytest.approx([alone, 2 * alone])
    assert calls[1].value.start_s == pytest.approx(alone)

    for streams in (("dp", "tp"), (None, None)):
        shared = switch_cluster(n, latency=0.0)
        calls = [shared.all_reduce(shared.gpus, size, stream=s) for s in streams]
        shared.run()
        assert [c.value.end_s for c in calls] == pytest.approx([2 * alone, 2 * alone])


def test_a_single_gpu_group_is_free():
    cluster = switch_cluster()
    call = cluster.all_reduce(["n0.gpu2"], 1e9)
    assert cluster.run() == 0.0
    assert call.value.duration_s == 0.0


# ---------------------------------------------------------------------- streams


def test_two_kernels_on_one_stream_serialise():
    cluster = switch_cluster()
    gpu = cluster.gpus[0]

    def work():
        records = yield gpu.compute(duration_s=2e-3) & gpu.compute(duration_s=5e-3)
        return list(records.values())

    process = cluster.process(work())
    assert cluster.run() == pytest.approx(7e-3)
    first, second = process.value
    assert isinstance(first, KernelRecord)
    assert (first.start_s, first.end_s) == pytest.approx((0.0, 2e-3))
    assert second.queued_s == pytest.approx(2e-3)
    assert second.duration_s == pytest.approx(5e-3)


def test_kernels_on_two_gpus_or_two_streams_overlap():
    cluster = switch_cluster()
    a, b = cluster.gpus[:2]
    done = [a.compute(duration_s=3e-3), b.compute(duration_s=4e-3),
            a.stream("side")(duration_s=1e-3)]
    cluster.run()
    assert [p.value.end_s for p in done] == pytest.approx([3e-3, 4e-3, 1e-3])


@pytest.mark.parametrize("compute_s", [1e-3, 0.5])
def test_compute_and_communication_overlap(compute_s):
    cluster, size = switch_cluster(), 4e9
    gpu = cluster.gpus[0]
    transfer_s = ALPHA + size / B

    def step():
        yield gpu.compute(duration_s=compute_s) & cluster.send(gpu, "n0.gpu1", size,
                                                               stream="comm")

    assert run(cluster, step()) == pytest.approx(max(compute_s, transfer_s), rel=1e-12)


def test_kernel_in_flops_runs_at_efficiency_of_the_peak():
    cluster = switch_cluster(gpu="h100")
    flops, efficiency = 3e12, 0.4
    process = cluster.gpus[1].compute(flops=flops, efficiency=efficiency, precision="fp8")
    cluster.run()
    peak = get_gpu("h100").peak_flops("fp8")
    assert process.value.duration_s == pytest.approx(flops / (peak * efficiency))


def test_a_stream_is_a_simpy_resource_and_serves_requests_in_the_order_made():
    cluster = switch_cluster()
    gpu, order = cluster.gpus[0], []
    assert isinstance(gpu.compute, Stream)
    assert isinstance(gpu.compute, simpy.Resource)

    def hold(turn, duration_s):
        with turn:
            yield turn
            order.append(cluster.now)
            yield cluster.env.timeout(duration_s)

    def hold_own(duration_s):  # the usual idiom: the request is made when this runs
        with gpu.compute.request() as turn:
            yield turn
            order.append(cluster.now)
            yield cluster.env.timeout(duration_s)

    cluster.process(hold_own(0.25))  # runs after every launch of this instant
    kernel = gpu.compute(duration_s=1.0)  # requests the stream at launch: first
    cluster.process(hold(gpu.compute.request(), 2.0))  # queued behind it
    last = gpu.compute(duration_s=0.5)  # queued behind that request
    assert cluster.run() == pytest.approx(3.75)
    assert kernel.value.end_s == pytest.approx(1.0)
    assert last.value.start_s == pytest.approx(3.0)
    assert order == pytest.approx([1.0, 3.5])


def test_a_held_send_waits_for_both_ends_streams():
    cluster, size = switch_cluster(), 5e9
    src, dst = cluster.gpus[0], cluster.gpus[1]
    dst.comm(duration_s=0.25)  # something else on the receiver's comm stream
    call = cluster.send(src, dst, size, stream="comm")
    cluster.run()
    assert call.value.start_s == pytest.approx(0.25)
    assert call.value.duration_s == pytest.approx(ALPHA + size / B, rel=1e-12)


def test_same_seed_same_result_and_the_seed_matters():
    def step_time(seed: int) -> float:
        cluster = switch_cluster(seed=seed)

        def step():
            kernels = [gpu.compute(duration_s=float(cluster.rng.uniform(1e-3, 2e-3)))
                       for gpu in cluster.gpus]
            yield cluster.env.all_of(kernels)
            yield cluster.all_reduce(cluster.gpus, 1e8)

        return run(cluster, step())

    assert step_time(7) == step_time(7)
    assert step_time(7) != step_time(8)


def test_trace_records_kernels_and_calls_on_stream_tracks():
    cluster = switch_cluster(2, trace=True)
    cluster.gpus[0].compute(duration_s=1e-3, name="gemm")
    cluster.all_reduce(cluster.gpus, 1e6, stream="comm")
    cluster.run()
    tracks = {(s.process, s.thread, s.name) for s in cluster.sim.tracer.spans}
    assert tracks == {("n0.gpu0", "compute", "gemm"), ("n0.gpu0", "comm", "all_reduce"),
                      ("n0.gpu1", "comm", "all_reduce")}


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("call", "key", "words"), [
    (lambda c: c.gpu("n0.gpu9"), "gpu", "did you mean"),
    (lambda c: c.send("n0.gpu0", "gpu1", 1e6), "gpu", "n0.gpu1"),
    (lambda c: c.send("n0.gpu0", "n0.gpu1", -1.0), "size_bytes", ">= 0"),
    (lambda c: c.all_reduce(c.gpus, float("nan")), "size_bytes", ">= 0"),
    (lambda c: c.all_reduce(c.gpus, "1 GB"), "size_bytes", ">= 0"),
    (lambda c: c.gpus[0].compute(duration_s=-1e-3), "duration_s", ">= 0"),
    (lambda c: c.gpus[0].compute(), "duration_s", "either"),
    (lambda c: c.gpus[0].compute(duration_s=1.0, flops=1e9), "duration_s", "either"),
    (lambda c: c.gpus[0].compute(flops=1e12), "gpu", "spec"),
    (lambda c: c.all_reduce(["n0.gpu0", "n0.gpu1", "n0.gpu0"], 1e6), "group",
     "n0.gpu0 more than once"),
    (lambda c: c.all_gather([], 1e6), "group", "at least one"),
    (lambda c: c.all_reduce("n0.gpu0", 1e6), "group", "list of GPUs"),
    (lambda c: c.send(c.gpus[1], "n0.gpu1", 1e6), "dst", "two different"),
    (lambda c: c.broadcast(c.gpus[:2], 1e6, root="n0.gpu3"), "root", "not in"),
    (lambda c: c.gpus[0].stream(""), "stream", "non-empty"),
    (lambda c: c.all_reduce(c.gpus, 1e6, stream="comm", algorithm="rign"), "algorithm",
     "did you mean 'ring'"),
    (lambda c: c.send("n0.gpu0", "n0.gpu1", 1e6, stream="comm", protocol="LL"), "protocol",
     "valid:"),
    (lambda c: c.collective("allreduce", c.gpus, 1e6), "op", "did you mean 'all_reduce'"),
    (lambda c: c.send(switch_cluster().gpus[0], "n0.gpu1", 1e6), "gpu", "another"),
    (lambda c: c.all_reduce(None, 1e6), "group", "list of GPUs"),
    (lambda c: c.run(until=-1), "until", "after now"),
    (lambda c: c.run(until=float("nan")), "until", "after now"),
])
def test_bad_input_is_a_clear_distsim_error(call, key, words):
    with pytest.raises(ConfigError) as error:
        call(switch_cluster())
    assert error.value.key == key
    assert words in str(error.value)


def test_bad_efficiency_precision_and_gpu_name():
    cluster = switch_cluster(gpu="h100")
    with pytest.raises(ConfigError, match=r"efficiency: must be a number in \(0, 1\], got 1\.5"):
        cluster.gpus[0].compute(flops=1e12, efficiency=1.5)
    with pytest.raises(ConfigError, match="no 'fp4' rate"):
        cluster.gpus[0].compute(flops=1e12, precision="fp4")
    with pytest.raises(ConfigError, match="unknown GPU 'h1000'"):
        switch_cluster(gpu="h1000")


def test_an_error_inside_a_process_comes_out_of_run_as_itself():
    cluster = switch_cluster()

    def step():
        yield cluster.gpus[0].compute(duration_s=1e-3)
        yield cluster.send("n0.gpu0", "n0.gpu7", 1e6)

    cluster.process(step())
    with pytest.raises(DistsimError) as error:
        cluster.run()
    assert isinstance(error.value, ConfigError)
    assert error.value.key == "gpu"
    assert "valid: n0.gpu0, n0.gpu1, n0.gpu2, n0.gpu3" in str(error.value)


# ---------------------------------------------------------------------- the docs


def test_the_docs_example_runs_and_prints_its_closed_form():
    """Runs the first ``python`` block of docs/simpy-api.md exactly as written."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    namespace: dict[str, object] = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks[0], str(DOCS), "exec"), namespace)
    n, bucket_bytes, buckets = 8, namespace["BUCKET_BYTES"], namespace["BUCKETS"]
    block_s = namespace["BLOCK_FLOPS"] / (0.5 * get_gpu("h100").peak_flops("bf16"))
    all_reduce_s = 2 * (n - 1) / n * bucket_bytes / 100e9 + 2 * (n - 1) * 2e-6
    assert all_reduce_s < block_s  # so every bucket but the last hides under compute
    expected = buckets * block_s + all_reduce_s
    assert namespace["step_s"] == pytest.approx(expected, rel=1e-12)
    assert printed.getvalue() == f"step: {expected * 1e3:.3f} ms\n"
    assert f"It prints `step: {expected * 1e3:.3f} ms`" in DOCS.read_text(encoding="utf-8")


def test_contending_sends_end_at_max_min_times_and_run_ends_at_the_last():
    """GPUs 1 and 2 send 1 MB and 10 MB to GPU 0 over one 100 GB/s, 1 us link each way
    (latency 2 us for two links): both share GPU 0's downlink at 50 GB/s until the small
    one lands at 2 us + 2 MB / 100 GB/s = 22 us; the big one then has 9 MB left at 100
    GB/s: 22 us + 90 us = 112 us.  ``run()`` returns the last real event's time, not a
    timer armed at the half rate (2 us + 10 MB / 50 GB/s = 202 us)."""
    topology = build_cluster({"preset": "switch", "gpus": 3, "link_bandwidth": "100 GB/s",
                              "link_latency": "1 us"})
    cluster = Cluster(topology, params=CommParams(protocol="simple").ideal())
    # stream=None: both transfer at once (on the comm stream, GPU 0 would take them in turn)
    small = cluster.send(cluster.gpus[1], cluster.gpus[0], 1e6, stream=None)
    big = cluster.send(cluster.gpus[2], cluster.gpus[0], 10e6, stream=None)
    ends: dict[str, float] = {}
    for name, process in (("small", small), ("big", big)):
        process.callbacks.append(lambda _e, name=name: ends.setdefault(name, cluster.now))
    end_s = cluster.run()
    assert ends["small"] == pytest.approx(22e-6, rel=1e-9)
    assert ends["big"] == pytest.approx(112e-6, rel=1e-9)
    assert end_s == pytest.approx(112e-6, rel=1e-9)
