"""A simulated iteration written as Chakra ETs, read back and run: the same iteration time."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from distsim_gpu.measured.chakra import load_chakra
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.scenario import scenario_from_mapping, spec_of
from distsim_gpu.workloads.iteration.ops import Collective, Compute
from distsim_gpu.workloads.iteration.simulator import simulate_iteration
from distsim_gpu.workloads.strategy.cp_comm import CP_COMM_TYPES
from distsim_gpu.workloads.traces.chakra import export_chakra, run_chakra
from distsim_gpu.workloads.traces.chakra_export import iteration_graphs
from distsim_gpu.workloads.traces.replay import SEND, replay_graph

A100 = {"preset": "dgx-a100", "nodes": 2}
SLOW = {"preset": "switch", "gpus": 16, "link_bandwidth": "2 GB/s"}
MOE = {"name": "tiny-moe", "layers": 4, "hidden": 256, "heads": 8, "seq_len": 128,
       "vocab": 1024, "experts": 8, "top_k": 2}


@pytest.mark.parametrize("changes", [
    {},  # tp 2 x pp 2 x dp 2, 1F1B: TP collectives, pipeline sends, DP all-reduce
    {"parallelism": {"schedule": "interleaved", "interleave": 2}},
    {"cluster": A100, "parallelism": {"tp": 1, "pp": 1, "dp": 16, "zero": 3},
     "training": {"global_batch": 32}},
    {"cluster": A100, "model": MOE, "parallelism": {"tp": 2, "pp": 1, "dp": 8, "ep": 4},
     "training": {"global_batch": 32}},
    # Overlapped expert all-to-alls, long enough on a slow switch to queue behind each
    # other: one after another on their stream in both runs.
    {"cluster": SLOW, "model": MOE, "parallelism": {"tp": 1, "pp": 1, "dp": 16, "ep": 8,
                                                    "moe_overlap": True},
     "training": {"global_batch": 64}},
    {"cluster": SLOW, "model": MOE, "parallelism": {"tp": 1, "pp": 2, "dp": 8, "ep": 8,
                                                    "schedule": "interleaved", "interleave": 2,
                                                    "fb_overlap": True},
     "training": {"global_batch": 64}},
    # DeepSeek's DualPipeV order (16 micro-batches on 2 stages): split backwards whose
    # weight halves run later, without sends.
    {"cluster": SLOW, "model": MOE, "parallelism": {"tp": 1, "pp": 2, "dp": 8, "ep": 8,
                                                    "schedule": "dualpipev", "interleave": 2,
                                                    "fb_overlap": True},
     "training": {"global_batch": 128}},
    # DualPipe's two directions, and the mirror ranks' gradient all-reduce.
    {"cluster": SLOW, "model": MOE, "parallelism": {"tp": 1, "pp": 2, "dp": 8, "ep": 8,
                                                    "schedule": "dualpipe", "interleave": 2,
                                                    "zero": 1, "fb_overlap": True},
     "training": {"global_batch": 64}},
    # A straggler's TP peer computes at its own pace and waits for it in their collectives.
    {"stragglers": {"n0.gpu3": 1.25}},
    # FSDP under a pipeline: gathers by the first forwards, reductions by the last backward.
    {"cluster": A100, "parallelism": {"tp": 1, "pp": 2, "dp": 8, "fsdp": True,
                                      "schedule": "interleaved", "interleave": 2},
     "training": {"global_batch": 32}},
    # HSDP: each call among a shard group or a replicate group, not every replica.
    {"cluster": A100, "parallelism": {"tp": 1, "pp": 1, "dp": 16, "fsdp": True,
                                      "dp_replicate": 4},
     "training": {"global_batch": 32}},
], ids=["1f1b", "interleaved", "zero3-a100", "moe-a100", "moe-halves", "moe-pairs",
        "dualpipev-zero-bubble", "dualpipe", "straggler", "fsdp-pp-a100", "hsdp-a100"])
def test_export_import_run_gives_the_iterations_time(tiny, tmp_path, changes):
    _check_round_trip(tiny, tmp_path, changes)


def _check_round_trip(tiny, tmp_path, changes):
    data = tiny(**{k: v for k, v in changes.items() if k != "cluster"})
    data["cluster"] = changes.get("cluster", data["cluster"])  # replaced, not merged
    spec = spec_of(scenario_from_mapping(data))
    # The export carries each kernel's time alone (a measured trace's kernel times already
    # hold what overlapped NCCL kernels cost them), so the round trip is exact without the
    # SMs those take from compute.
    spec = replace(spec, comm=replace(spec.comm, nccl_sms=0))
    simulated = simulate_iteration(spec).iteration_time_s
    graphs, world = iteration_graphs(spec)
    assert world == len(spec.topology.gpus) == len(graphs)
    # Straight through the replay, and written as ETs and read back.
    assert replay_graph(graphs, spec.topology, spec.comm).time_s == pytest.approx(
        simulated, rel=1e-9, abs=0)
    export_chakra(graphs, tmp_path)
    run = run_chakra(load_chakra([tmp_path]), spec.topology, spec.comm)
    assert run.time_s == pytest.approx(simulated, rel=1e-9, abs=0)


# Context parallelism on the tiny 8-GPU switch: cp 2 and cp 4, with and without a pipeline.
CP_SHAPES = {"cp2": {"tp": 2, "pp": 1, "dp": 2, "cp": 2},
             "cp2-pp2": {"tp": 2, "pp": 2, "dp": 1, "cp": 2},
             "cp4": {"tp": 2, "pp": 1, "dp": 1, "cp": 4},
             "cp4-pp2": {"tp": 1, "pp": 2, "dp": 1, "cp": 4}}


@pytest.mark.parametrize(("shape", "comm_type"), [
    (shape, kind) for shape, degrees in CP_SHAPES.items() for kind in CP_COMM_TYPES
    if kind != "a2a+p2p" or degrees["cp"] > 2])  # (its a2a group: strictly inside cp)
def test_every_cp_comm_type_exports_the_iterations_time(tiny, tmp_path, comm_type, shape):
    """Rings (p2p, a2a+p2p, torch_alltoall, torch_allgather's dK/dV) as sends to the next
    CP rank and receives from the one before; collectives (all_gather, a2a) as calls."""
    parallel = {**CP_SHAPES[shape], "cp_comm_type": comm_type}
    if comm_type == "a2a+p2p":
        parallel["cp_a2a_size"] = 2
    # (4 micro-batches: as exact as 8, in half the time)
    _check_round_trip(tiny, tmp_path, {"parallelism": parallel,
                                       "training": {"global_batch": 4}})


def test_cp_rings_across_nodes_export_the_iterations_time(tiny, tmp_path):
    """tp 4 x cp 4 on two 8-GPU nodes: each ring crosses the nodes (over InfiniBand)."""
    _check_round_trip(tiny, tmp_path, {
        "cluster": A100, "training": {"global_batch": 2},
        "parallelism": {"tp": 4, "pp": 1, "dp": 1, "cp": 4}})


@pytest.mark.parametrize(("comm_type", "extra", "hop", "steps"), [
    ("p2p", {}, 2, 4),  # the ring over every CP rank: the next is tp ranks on
    ("a2a+p2p", {"cp_a2a_size": 2}, 4, 2),  # the same a2a rank of the next group
])
def test_a_ring_step_is_a_send_to_the_next_cp_rank_and_a_receive(tiny, tmp_path, comm_type,
                                                                 extra, hop, steps):
    """tp 2 x cp 4 (ranks tp-major inside cp): every GPU sends only to ``rank + hop`` and
    receives only from ``rank - hop`` (mod 8), ``steps - 1`` K/V blocks a layer forward
    and ``steps`` backward (Transformer Engine's ring; the middle backward steps carry
    K/V and dK/dV), on 8 micro-batches of 4 layers; a block is K and V of s/cp tokens of
    a tensor rank's 128 channels in bf16.  Written out, COMM_SEND and COMM_RECV nodes."""
    spec = spec_of(scenario_from_mapping(tiny(parallelism={
        "tp": 2, "pp": 1, "dp": 1, "cp": 4, "cp_comm_type": comm_type, **extra})))
    graphs, world = iteration_graphs(spec)
    block = 2 * (128 // 4) * (256 // 2) * 2
    runs = 8 * 4
    for rank, nodes in graphs.items():
        p2p = [n.op for n in nodes if isinstance(n.op, Collective) and n.op.op == SEND]
        sent = [op for op in p2p if op.group[0] == rank]
        received = [op for op in p2p if op.group[1] == rank]
        assert {op.group for op in sent} == {(rank, (rank + hop) % world)}
        assert {op.group for op in received} == {((rank - hop) % world, rank)}
        middle = max(steps - 2, 0)  # backward steps sending two blocks
        assert len(sent) == len(received) == runs * (2 * steps - 1)
        assert sum(op.size_bytes for op in sent) == runs * block * (
            (steps - 1) + (steps - middle) + 2 * middle)
    export_chakra(graphs, tmp_path)
    kinds = Counter(node.type for trace in load_chakra([tmp_path]) for node in trace.nodes)
    assert kinds[5] == kinds[6] == world * runs * (2 * steps - 1)  # COMM_SEND, COMM_RECV


def test_cli_exports_and_checks(tiny, write_scenario, tmp_path, capsys):
    scenario = write_scenario(tmp_path / "tiny.yaml", tiny())
    assert main(["trace", "export-chakra", str(scenario), "--out", str(tmp_path / "et"),
                 "--check"]) == 0
    out = capsys.readouterr().out
    assert "wrote 8 Chakra ETs" in out and "relative difference" in out
    assert len(list((tmp_path / "et").glob("tiny-gpt.*.et"))) == 8
    (tmp_path / "a-file").write_text("")
    assert main(["trace", "export-chakra", str(scenario), "--out", str(tmp_path / "a-file")]) == 2
    assert "is not an empty directory or an earlier export's" in capsys.readouterr().err


def test_an_export_replaces_an_earlier_one_whole(tiny, write_scenario, tmp_path, capsys):
    """Eight ranks over sixteen: the earlier export's ranks 8-15 go (a reader of the
    folder met them as a second job's); a folder holding anything else is refused."""
    scenario = write_scenario(tmp_path / "tiny.yaml", tiny())
    out = tmp_path / "et"
    assert main(["trace", "export-chakra", str(scenario), "--out", str(out),
                 "--set", "cluster.gpus=16", "--set", "parallelism.dp=4",
                 "--set", "training.global_batch=16"]) == 0
    assert len(list(out.glob("*.et"))) == 16
    # (named differently from the first: the files are matched by name, not path)
    assert main(["trace", "export-chakra", str(scenario), "--out",
                 f"{tmp_path}/./et/"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [f"tiny-gpt.{r}.et" for r in
                                                     sorted(range(8), key=str)]
    (out / "notes.txt").write_text("mine")
    assert main(["trace", "export-chakra", str(scenario), "--out", str(out)]) == 2
    assert "it holds notes.txt" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"


def test_a_stragglers_tensor_peer_computes_at_its_own_pace_in_the_export(tiny):
    """Each GPU's compute nodes take its own factor: the straggler's 1.25x, its TP peer's
    its own (it waits for the straggler in their next collective when the graph runs, as
    the per-GPU breakdown counts it); they had both taken the straggler's."""
    spec = spec_of(scenario_from_mapping(tiny(stragglers={"n0.gpu3": 1.25})))
    healthy = spec_of(scenario_from_mapping(tiny()))
    graphs, _world = iteration_graphs(spec)
    plain, _world = iteration_graphs(healthy)

    def computes(of, gpu):
        return [n.duration_s for n in of[spec.topology.rank_of(gpu)]
                if isinstance(n.op, Compute)]

    slow, peer = computes(graphs, "n0.gpu3"), computes(graphs, "n0.gpu2")
    assert len(slow) == len(peer) > 0
    assert peer == pytest.approx(computes(plain, "n0.gpu2"), rel=1e-12)
    assert slow == pytest.approx([1.25 * d for d in peer], rel=1e-12)
