"""Chakra ETs as a workload: closed forms on the ideal switch, round trips, bad graphs."""

from __future__ import annotations

import json

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.measured.chakra import ChakraNode, ChakraTrace, load_chakra
from distsim_gpu.simcore.errors import ConfigError, DistsimError, ParseError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.traces.chakra import chakra_graphs, export_chakra, run_chakra

B, L = 50e9, 1e-6  # the switch's links: bytes/s each way, seconds per link
ALPHA = 2 * L  # GPU -> switch -> GPU
PARAMS = CommParams(algorithm="ring", protocol="simple").ideal()


def _switch(n: int):
    return build_cluster({"preset": "switch", "gpus": n, "link_bandwidth": B,
                          "link_latency": L})


def comp(i, us, deps=(), cpu=False):
    return ChakraNode(i, f"k{i}", 4, data_deps=deps, duration_micros=us,
                      attrs={"is_cpu_op": cpu})


def coll(i, size, deps=(), kind=0, group=None):
    attrs = {"comm_type": kind, "comm_size": size}
    if group is not None:
        attrs["pg_ranks"] = group
    return ChakraNode(i, f"c{i}", 7, data_deps=deps, attrs=attrs)


def p2p(i, send, peer, size, deps=()):
    return ChakraNode(i, f"p{i}", 5 if send else 6, data_deps=deps,
                      attrs={"comm_dst" if send else "comm_src": peer, "comm_size": size})


def trace(rank, *nodes):
    return ChakraTrace(f"t.{rank}.et", rank, "1.0.1", {}, nodes)


def test_compute_then_all_reduce_is_the_slowest_rank_plus_the_ring_formula():
    size = 64 * 2**20
    traces = [trace(r, comp(0, us), coll(1, size, (0,)), comp(2, 5, (1,)))
              for r, us in ((0, 10), (1, 30), (2, 20), (3, 0))]
    run = run_chakra(traces, _switch(4), PARAMS)
    ring = 2 * 3 / 4 * size / B + 2 * 3 * ALPHA
    assert run.time_s == pytest.approx(30e-6 + ring + 5e-6, rel=1e-12)
    assert run.result.end_s[0] == pytest.approx(run.time_s, rel=1e-12)  # all leave together


def test_a_send_goes_when_its_sender_gets_there_and_the_receiver_waits_for_it():
    size = 10e9
    transfer = size / B + ALPHA
    for sender_us, receiver_us in ((0, 20), (30, 0), (0, 10**6)):
        traces = [trace(0, comp(0, sender_us), p2p(1, True, 1, int(size), (0,))),
                  trace(1, comp(0, receiver_us), p2p(1, False, 0, int(size), (0,)))]
        run = run_chakra(traces, _switch(2), PARAMS)
        # The receiver finishes when it has reached its receive and the bytes are in.
        assert run.result.end_s[1] == pytest.approx(
            max(sender_us * 1e-6 + transfer, receiver_us * 1e-6), rel=1e-12)


def test_streams_serialise_gpu_work_and_overlap_cpu_work():
    # Two independent GPU kernels share the compute stream; a CPU op runs beside them.
    run = run_chakra([trace(0, comp(0, 10), comp(1, 15), comp(2, 40, cpu=True))],
                     _switch(1), PARAMS)
    assert run.time_s == pytest.approx(40e-6)
    assert run.result.compute_s[0] == pytest.approx(40e-6)
    run = run_chakra([trace(0, comp(0, 10), comp(1, 15), comp(2, 4, (1,), cpu=True))],
                     _switch(1), PARAMS)
    assert run.time_s == pytest.approx(29e-6)  # 10 + 15 serial, then the CPU op


def test_recorded_threads_and_streams_each_run_one_op_at_a_time():
    def on(node, tid):
        return ChakraNode(node.id, node.name, node.type, node.ctrl_deps, node.data_deps,
                          node.duration_micros, attrs={**node.attrs, "tid": tid})

    # Kernels on streams 7 and 14 overlap; two on stream 7 do not; CPU threads 1 and 2 run
    # side by side.
    run = run_chakra([trace(0, on(comp(0, 10), 7), on(comp(1, 15), 14), on(comp(2, 4), 7),
                            on(comp(3, 30, cpu=True), 1), on(comp(4, 20, cpu=True), 2))],
                     _switch(1), PARAMS)
    assert run.time_s == pytest.approx(30e-6)
    run = run_chakra([trace(0, on(comp(0, 10), 7), on(comp(1, 15), 7), on(comp(2, 4), 7))],
                     _switch(1), PARAMS)
    assert run.time_s == pytest.approx(29e-6)


def test_flops_only_nodes_take_them_at_the_given_speed():
    node = ChakraNode(0, "gemm", 4, attrs={"num_ops": 2 * 10**12})
    assert run_chakra([trace(0, node)], _switch(1), flops_per_s=1e15).time_s == \
        pytest.approx(2e-3)
    with pytest.raises(ConfigError, match="FLOPs"):
        run_chakra([trace(0, node)], _switch(1))


def test_export_import_run_gives_the_same_time(tmp_path):
    size = 3 * 2**20 + 7
    traces = [trace(r, comp(0, 11 + r), coll(1, size, (0,), group=[0, 1, 2, 3]),
                    comp(2, 3, (1,), cpu=True),
                    p2p(3, r % 2 == 0, r + 1 if r % 2 == 0 else r - 1, 1 << 20, (0,)),
                    coll(4, size // 3, (3,), kind=2, group=[r - r % 2, r - r % 2 + 1]),
                    ChakraNode(5, "barrier", 7, data_deps=(4,), attrs={"comm_type": 9}),
                    comp(6, 2, (5, 2)))
              for r in range(4)]
    topology = build_cluster({"preset": "dgx-a100", "nodes": 2})
    first = run_chakra(traces, topology, CommParams())
    graphs, _world, _notes = chakra_graphs(traces)
    paths = export_chakra(graphs, tmp_path / "et")
    assert [p.rsplit("/", 1)[-1] for p in paths] == [f"distsim.{r}.et" for r in range(4)]
    again = run_chakra(load_chakra([tmp_path / "et"]), topology, CommParams())
    assert again.time_s == pytest.approx(first.time_s, rel=1e-9, abs=0)
    assert again.result.end_s == first.result.end_s


@pytest.mark.parametrize(("nodes", "words"), [
    ((comp(0, 1, (7,)),), "depends on node 7"),
    ((comp(0, 1, (0,)),), "its own data"),
    ((comp(0, 1, (1,)), comp(1, 1, (0,))), "cycle"),
    ((p2p(0, True, 5, 10),), "comm_dst"),
    ((ChakraNode(0, "?", 0),), "INVALID_NODE"),
    ((coll(0, 10, group=[1, 2]),), "not in its group"),
    ((coll(0, 10, kind=42),), "comm_type"),
])
def test_bad_graphs_are_clear_errors(nodes, words):
    with pytest.raises(ParseError, match=words) as caught:
        run_chakra([trace(0, *nodes), trace(1)], _switch(2))
    assert caught.value.source == "t.0.et"


def test_the_chakra_samples_run(chakra_samples):
    traces = load_chakra([next(chakra_samples.rglob("chakra.0.et"))])
    topology = build_cluster({"preset": "dgx-a100"})
    run = run_chakra(traces, topology, world_size=8)
    gpu_kernels = sum(n.duration_s for n in traces[0].nodes if n.type == 4 and not n.is_cpu_op)
    # The GPU's kernels run one at a time: the iteration is at least their sum.
    assert run.time_s >= gpu_kernels > 0.1
    assert run.result.communication_s[0] > 0 and run.world_size == 8
    # The JSON excerpt's control dependencies point at nodes it left out: dropped, said so.
    (small,) = load_chakra([next(chakra_samples.rglob("small_chakra.0.json"))])
    excerpt = run_chakra([small], topology, ctrl_deps=True)
    assert any(note.endswith("were dropped") for note in excerpt.notes)
    # Its metadata records the job's 8 GPUs ("ngpus"): the run has 8 ranks, and says why.
    assert excerpt.world_size == 8 and "a job of 8 GPUs" in excerpt.notes[0]


def _recorded(rank, metadata, *nodes):
    return ChakraTrace(f"t.{rank}.et", rank, "1.0.1", metadata, nodes)


def test_the_gpu_count_an_et_records_sizes_the_job():
    size = 64 * 2**20
    one = [_recorded(0, {"ngpus": 4}, comp(0, 10), coll(1, size, (0,)))]
    run = run_chakra(one, _switch(4), PARAMS)
    # A collective without pg_ranks spans the job's 4 ranks, not the one traced.
    assert run.world_size == 4
    assert run.time_s == pytest.approx(10e-6 + 2 * 3 / 4 * size / B + 2 * 3 * ALPHA,
                                       rel=1e-12)
    assert "records a job of 4 GPUs: it runs as 4 ranks" in run.notes[0]
    assert "3 of 4 ranks have no trace" in run.notes[1]
    given = run_chakra(one, _switch(4), PARAMS, world_size=2)  # the option wins
    assert given.world_size == 2
    assert given.time_s == pytest.approx(10e-6 + 2 * 1 / 2 * size / B + 2 * 1 * ALPHA,
                                         rel=1e-12)
    assert "it runs as --world-size gives it, 2 ranks" in given.notes[0]
    # A world_size key (a PyTorch ET's distributed info) counts as well.
    assert run_chakra([_recorded(0, {"world_size": 2}, comp(0, 1))], _switch(4)).world_size == 2


def test_a_recorded_gpu_count_larger_than_the_cluster_says_where_it_came_from():
    with pytest.raises(ConfigError, match="the GPU count their metadata records") as caught:
        run_chakra([_recorded(0, {"ngpus": 8}, comp(0, 1))], _switch(4))
    assert "--world-size" in caught.value.hint


@pytest.mark.parametrize("metadata", [{"ngpus": "eight"}, {"ngpus": 0}, {"ngpus": True},
                                      {"ngpus": 2.5}])
def test_a_recorded_gpu_count_that_is_no_count_is_left_out_and_said(metadata):
    run = run_chakra([_recorded(0, metadata, comp(0, 1))], _switch(2))
    assert run.world_size == 1
    assert run.notes == (f"t.0.et: metadata ngpus {metadata['ngpus']!r} is not a GPU count "
                         "(a positive integer); left out",)


def test_traces_that_disagree_on_the_job_size_take_the_largest_and_say_so():
    traces = [_recorded(0, {"ngpus": 2}, comp(0, 1)), _recorded(1, {"ngpus": 4}, comp(0, 1))]
    run = run_chakra(traces, _switch(4))
    assert run.world_size == 4
    assert any("disagree on the job's GPUs (2 in t.0.et's ngpus, 4 in t.1.et's ngpus)" in n
               for n in run.notes)


def test_cli_runs_and_exports(tmp_path, capsys):
    from distsim_gpu.scenarios.cli.main import main

    graphs, _world, _notes = chakra_graphs([trace(0, comp(0, 10), coll(1, 1 << 20, (0,))),
                                            trace(1, comp(0, 5), coll(1, 1 << 20, (0,)))])
    export_chakra(graphs, tmp_path / "in")
    assert main(["trace", "chakra", str(tmp_path / "in"), "--cluster", "dgx-a100",
                 "--out", str(tmp_path / "out"), "-o", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "2 rank(s) of 2" in out and "wrote" in out
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("ph") == "X"} == {"k0", "c1"}
    assert main(["trace", "chakra", str(tmp_path / "missing"), "--cluster", "dgx-a100"]) == 2
    assert main(["trace", "chakra", str(tmp_path / "in"), "--cluster", "dgx-a100",
                 "--flops", "-1"]) == 2
    with pytest.raises(DistsimError):
        load_chakra([tmp_path / "empty-dir-that-is-missing"])
