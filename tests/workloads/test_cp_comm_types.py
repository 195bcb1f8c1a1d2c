"""Context parallelism's communication types (``parallelism.cp_comm_type``): each one's
bytes, blocking and overlap against closed forms, the a2a+p2p groups, clear errors, the
memory each holds, folded runs equal to full ones and the lower bound below them."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import RooflineCosts
from distsim_gpu.workloads.cost.context_parallel import (
    CpShapes,
    attention_steps,
    core_attention_time_s,
    ring_step_blocks,
)
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import memory_per_gpu
from distsim_gpu.workloads.cost.traffic import cp_message_bytes
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Wait
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.dimensions import cp_lanes
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
    parallel_from_mapping,
)

from tests.workloads.test_context_parallel import GQA, _cluster, _layer_ops

S, B, D = 8192, 1, 128  # GQA's sequence, the micro-batch, its head width
TRAINING = TrainingConfig(micro_batch=B, global_batch=1)


def _ops(kind: str, pass_: str, cp: int = 4, tp: int = 2, **extra):
    costs = RooflineCosts(get_gpu("h100-sxm"))
    parallel = ParallelConfig(tp=tp, cp=cp, cp_comm_type=kind, **extra)
    return costs, parallel, _layer_ops(parallel, TRAINING, costs, pass_)[1]


def _calls(ops):
    return [(op.op, op.group, op.size_bytes, op.blocking) for op in ops
            if isinstance(op, Collective) and op.group in ("cp", "cp_collective")]


def _core(costs, pass_: str, seq_len: int, tp: int) -> float:
    return core_attention_time_s(costs, pass_, GQA, LayerShard(B, seq_len, tp=tp,
                                                                layer_index=1))


def _compute(ops) -> float:
    return sum(op.duration_s for op in ops if isinstance(op, Compute))


def _layer(costs, pass_: str, cp: int, tp: int) -> float:
    return costs.layer_time_s(pass_, GQA, LayerShard(B, S // cp, tp=tp, layer_index=1))


def test_p2p_is_the_default_and_its_ring_is_unchanged() -> None:
    """The default writes nothing new into a resolved scenario and runs TE's ring."""
    assert ParallelConfig().cp_comm_type == "p2p"
    assert "cp_comm_type" not in ParallelConfig(cp=2).to_dict()
    assert parallel_from_mapping({"cp": 2, "cp_comm_type": "A2A"}).to_dict()[
        "cp_comm_type"] == "a2a"
    shapes = CpShapes(block_s=1.0, kv_bytes=10.0, steps=4)
    for pass_ in ("fwd", "bwd"):
        sends = [step.size_bytes for step in attention_steps("p2p", pass_, shapes)
                 if step.kind == "call"]
        assert sends == [10.0 * blocks for blocks in ring_step_blocks(pass_, 4) if blocks]


@pytest.mark.parametrize("cp", [2, 4])
def test_all_gather_gathers_kv_then_reduce_scatters_dkv(cp) -> None:
    """TE's all_gather: forward one blocking all-gather of cp K/V blocks (no ring), the
    same cp blocks of attention; backward the gather again and a blocking reduce-scatter
    of the whole sequence's dK/dV."""
    costs, parallel, forward = _ops("all_gather", "F", cp=cp)
    block = cp_message_bytes(GQA, parallel, TRAINING)
    assert block == 2 * (S / cp) * B * (8 // 2) * D * 2
    assert _calls(forward) == [("all_gather", "cp_collective", cp * block, True)]
    assert not any(isinstance(op, Wait) for op in forward)
    assert _compute(forward) == pytest.approx(
        _layer(costs, "fwd", cp, 2) + (cp - 1) * _core(costs, "fwd", S // cp, 2))
    _, _, backward = _ops("all_gather", "B", cp=cp)
    assert _calls(backward) == [("all_gather", "cp_collective", cp * block, True),
                                ("reduce_scatter", "cp_collective", cp * block, True)]


def test_a2a_is_ulysses() -> None:
    """a2a: all-to-alls of the rank's Q+K+V and of its output, blocking, around one
    attention over the whole sequence with heads/(tp·cp) heads; backward dO first, then
    dQ/dK/dV.  Each buffer is (s/cp)·b·heads/tp·d (+ K/V) elements, of which (cp−1)/cp
    leave the rank (the all-to-all's own accounting)."""
    cp, tp = 4, 2
    costs, _, forward = _ops("a2a", "F", cp=cp, tp=tp)
    q = (S / cp) * B * (32 // tp) * D * 2
    kv = 2 * (S / cp) * B * (8 // tp) * D * 2
    assert _calls(forward) == [("alltoall", "cp_collective", q + kv, True),
                               ("alltoall", "cp_collective", q, True)]
    whole = _core(costs, "fwd", S, tp * cp)
    cores = [op.duration_s for op in forward if isinstance(op, Compute)
             and "attention " in op.label]
    assert cores == [whole]  # one kernel, not cp ring blocks
    assert _compute(forward) == pytest.approx(
        _layer(costs, "fwd", cp, tp) - _core(costs, "fwd", S // cp, tp) + whole)
    _, _, backward = _ops("a2a", "B", cp=cp, tp=tp)
    assert _calls(backward) == [("alltoall", "cp_collective", q, True),
                                ("alltoall", "cp_collective", q + kv, True)]


def test_a2a_plus_p2p_rings_across_the_a2a_groups() -> None:
    """a2a+p2p with groups of a = 2 of cp = 4: the all-to-alls among the pairs, a ring of
    cp/a = 2 steps across them whose block holds s·a/cp tokens of heads/(tp·a) heads —
    as many K/V bytes as the plain ring's block; each step computes that shape's block."""
    cp, tp, a = 4, 2, 2
    costs, parallel, forward = _ops("a2a+p2p", "F", cp=cp, tp=tp, cp_a2a_size=a)
    q = (S / cp) * B * (32 // tp) * D * 2
    kv = 2 * (S / cp) * B * (8 // tp) * D * 2
    assert _calls(forward) == [("alltoall", "cp_collective", q + kv, True),
                               ("sendrecv", "cp", kv, False),
                               ("alltoall", "cp_collective", q, True)]
    assert kv == cp_message_bytes(GQA, parallel, TRAINING)
    block = _core(costs, "fwd", S * a // cp, tp * a)
    blocks = [op.duration_s for op in forward if isinstance(op, Compute)
              and "attention block" in op.label]
    assert blocks == [block] * (cp // a)
    _, _, backward = _ops("a2a+p2p", "B", cp=cp, tp=tp, cp_a2a_size=a)
    assert [c[2] for c in _calls(backward)] == [q, kv, kv, q + kv]  # K/V, then dK/dV
    ring, group = cp_lanes(ParallelConfig(cp=4, cp_comm_type="a2a+p2p", cp_a2a_size=2),
                           ring=True), cp_lanes(ParallelConfig(
                               cp=4, cp_comm_type="a2a+p2p", cp_a2a_size=2), ring=False)
    assert ring == (4, (((0, 0), (2, 0)), ((1, 0), (3, 0))))  # TE's send_dst
    assert group == (4, (((0, 0), (1, 0)), ((2, 0), (3, 0))))
    assert cp_lanes(ParallelConfig(cp=4, cp_comm_type="all_gather"), ring=False) == (
        4, (((0, 0), (1, 0), (2, 0), (3, 0)),))
    assert cp_lanes(ParallelConfig(cp=4), ring=False) == (1, (((0, 0),),))  # p2p: none


@pytest.mark.parametrize("cp", [2, 4])
def test_torch_allgather_overlaps_one_block_and_sends_fp32_dkv(cp) -> None:
    """PyTorch's allgather: one asynchronous all-gather of cp K/V blocks, waited after
    block 0; each later block merges into an fp32 output (cast 6 B, three passes 36 B an
    element; the first block's cast and the final cast back, 6 B each).  Backward: cp
    ring sends of fp32 dK/dV — twice a bf16 K/V block each."""
    costs, parallel, forward = _ops("torch_allgather", "F", cp=cp)
    block = cp_message_bytes(GQA, parallel, TRAINING)
    assert _calls(forward) == [("all_gather", "cp_collective", cp * block, False)]
    order = [f"wait {op.handle}" if isinstance(op, Wait) else op.label for op in forward
             if isinstance(op, (Compute, Wait)) or getattr(op, "group", "") == "cp_collective"]
    gather = order.index("L1 fwd cp kv all_gather")
    assert order[gather + 1:gather + 4] == ["L1 fwd attention block 0", "wait cp:L1 fwd kv",
                                            "L1 fwd attention block 1"]
    outputs = (S / cp) * B * (32 // 2) * D
    gpu = get_gpu("h100-sxm")
    merge_s = outputs * (6 + 42 * (cp - 1) + 6) / (
        gpu.memory_bandwidth_bytes_per_s * costs.resolved_memory_efficiency)
    assert _compute(forward) == pytest.approx(
        _layer(costs, "fwd", cp, 2) + (cp - 1) * _core(costs, "fwd", S // cp, 2) + merge_s)
    _, _, backward = _ops("torch_allgather", "B", cp=cp)
    calls = _calls(backward)
    assert calls[0] == ("all_gather", "cp_collective", cp * block, False)
    assert calls[1:] == [("sendrecv", "cp", 2 * block, False)] * cp
    waits = sum(isinstance(op, Wait) for op in backward)
    assert waits == 1 + cp  # the gather, every dK/dV send


def test_torch_alltoall_is_the_ring_forward_and_fp32_dkv_backward() -> None:
    """PyTorch's alltoall rotater: forward the ring's cp − 1 K/V sends; backward cp − 1
    K/V sends and cp fp32 dK/dV sends, every one asynchronous."""
    cp = 4
    _, parallel, forward = _ops("torch_alltoall", "F", cp=cp)
    block = cp_message_bytes(GQA, parallel, TRAINING)
    assert _calls(forward) == [("sendrecv", "cp", block, False)] * (cp - 1)
    _, _, backward = _ops("torch_alltoall", "B", cp=cp)
    sizes = sorted(c[2] for c in _calls(backward))
    assert sizes == [block] * (cp - 1) + [2 * block] * cp


@pytest.mark.parametrize(("extra", "text"), [
    ({"cp_comm_type": "ring"}, "parallelism.cp_comm_type: unknown context-parallel "
                               "communication 'ring'"),
    ({"cp_comm_type": "allgather"}, "parallelism.cp_comm_type: cp_comm_type 'allgather' "
                                    "is ambiguous"),
    ({"cp_comm_type": "a2a", "cp": 8, "dp": 1},
     "parallelism.cp_comm_type: cp_comm_type a2a splits attention heads over 8 ranks: the "
     "16 query and 4 key/value heads per tensor rank (heads 32, kv_heads 8, tp 2) do not "
     "divide by 8"),
    ({"cp_comm_type": "a2a+p2p", "cp_a2a_size": 3},
     "parallelism.cp_a2a_size: a2a+p2p needs cp_a2a_size strictly between 1 and cp = 4"),
    ({"cp_comm_type": "a2a+p2p"},
     "parallelism.cp_a2a_size: a2a+p2p needs cp_a2a_size strictly between 1 and cp = 4"),
    ({"cp_a2a_size": 2}, "parallelism.cp_a2a_size: cp_a2a_size 2 needs cp_comm_type "
                         "a2a+p2p (it is p2p)"),
])
def test_bad_cp_comm_is_a_clear_error(extra, text) -> None:
    parallel = parallel_from_mapping({"tp": 2, "cp": 4, "dp": 2, **extra})
    with pytest.raises(ConfigError) as info:
        check_strategy(GQA, parallel, TrainingConfig(global_batch=8), num_gpus=16,
                       seq_len=S)
    assert str(info.value).startswith(text)


def test_every_type_needs_fused_attention() -> None:
    costs = RooflineCosts(get_gpu("h100-sxm"), attention="unfused")
    for kind in ("all_gather", "a2a", "torch_allgather"):
        with pytest.raises(ConfigError, match=r"compute\.attention"):
            _layer_ops(ParallelConfig(tp=2, cp=4, cp_comm_type=kind), TRAINING, costs, "F")


@pytest.mark.parametrize(("kind", "extra_blocks"), [
    ("all_gather", 2 * 4 - 4), ("torch_allgather", 4 + 4 - 4), ("torch_alltoall", 2 + 4 - 4)])
def test_buffers_beside_the_activations(kind, extra_blocks) -> None:
    """Against p2p's 4 K/V blocks: all_gather holds 2·cp (gathered K/V, whole dK/dV);
    PyTorch's cp gathered (allgather) or 2 (alltoall) and two fp32 dK/dV blocks."""
    def activations(comm: str) -> float:
        return memory_per_gpu(GQA, ParallelConfig(tp=2, cp=4, cp_comm_type=comm),
                              TrainingConfig(micro_batch=1, seq_len=S),
                              flash_attention=True).activations_bytes
    block = 2 * (S / 4) * B * 4 * D * 2
    assert activations(kind) - activations("p2p") == pytest.approx(extra_blocks * block)


TYPES = [("all_gather", {}), ("a2a", {}), ("a2a+p2p", {"cp_a2a_size": 2}),
         ("torch_allgather", {}), ("torch_alltoall", {})]


@pytest.mark.parametrize(("kind", "extra"), TYPES)
def test_folded_runs_equal_full_ones(uniform, kind, extra) -> None:
    """Each type's calls stay inside its ring's block: folded and full runs agree."""
    model = model_from_mapping({"name": "small", "layers": 2, "hidden": 1024, "heads": 16,
                                "seq_len": 4096, "vocab": 32000})
    parallel = ParallelConfig(tp=4, cp=4, dp=2, bucket_params=2_000_000, cp_comm_type=kind,
                              **extra)
    training = TrainingConfig(micro_batch=1, global_batch=4)
    folded, full = (uniform.run(_cluster(), parallel, training, model=model,
                                costs=RooflineCosts(uniform.gpu), comm=CommParams(),
                                fold_replicas=fold) for fold in (True, False))
    assert folded.folding == "folded 2 context-parallel rings of 4 into 1"
    assert folded.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    ids, _cap, bytes_a, *_ = folded.simulation.network.link_stat_arrays()
    ids_b, _cap_b, bytes_b, *_ = full.simulation.network.link_stat_arrays()
    assert ids == ids_b and list(bytes_a) == pytest.approx(list(bytes_b), rel=1e-9)


@pytest.mark.parametrize(("kind", "extra"), TYPES)
def test_the_lower_bound_stays_below(tiny, kind, extra) -> None:
    from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
    from distsim_gpu.scenarios.study.search import iteration_bounds
    data = tiny(parallelism={"tp": 1, "cp": 4, "pp": 2, "dp": 1, "cp_comm_type": kind,
                             **extra}, training={"global_batch": 4})
    scenario = scenario_from_mapping(data)
    assert 0 < iteration_bounds(scenario).lower_bound_s <= run_scenario(
        scenario).iteration_time_s


@pytest.mark.parametrize("kind", ["all_gather", "a2a", "torch_allgather"])
def test_expert_blocks_over_cp_groups_fold_as_the_full_run(uniform, kind) -> None:
    """Megatron-Core's expert grid over dp·cp with a CP type's collectives beside the
    experts' all-to-alls: whatever the folding, the iteration is the full run's."""
    from tests.workloads.test_folding import assert_same_iteration, both, cluster
    moe = model_from_mapping({"name": "small-moe", "layers": 2, "hidden": 1024, "heads": 16,
                              "seq_len": 512, "vocab": 32000, "experts": 8, "top_k": 2})
    parallel = ParallelConfig(tp=2, cp=2, dp=8, ep=4, sequence_parallel=True,
                              cp_comm_type=kind)
    folded, full = both(uniform, cluster("rail-optimized", "dmodk"), parallel,
                        TrainingConfig(micro_batch=1, global_batch=16), model=moe,
                        costs=RooflineCosts(get_gpu("a100-80gb")))
    assert folded.folding.startswith("folded")
    assert_same_iteration(folded, full)
