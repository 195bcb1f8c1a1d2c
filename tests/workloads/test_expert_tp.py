"""Expert-tensor parallelism as physics: the same FLOP per GPU whatever ``expert_tp``,
the GEMMs' shapes, the parameters each GPU holds and the bytes of a MoE block's
tensor-parallel collectives (Megatron-Core's all-to-all dispatcher)."""

from __future__ import annotations

import pytest
from distsim_gpu.workloads.cost.compute.operators import layer_work
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.parameters import layer_params_local
from distsim_gpu.workloads.cost.traffic import moe_tp_scale
from distsim_gpu.workloads.specs.models import get_model, model_from_mapping
from distsim_gpu.workloads.strategy.parallel import ParallelConfig

GROK = get_model("grok-1")


def _experts(shard: LayerShard) -> dict[str, object]:
    work = layer_work("fwd", GROK, shard)
    return {k.name: k for k in work.kernels if k.name.startswith("expert_")}


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_expert_flop_per_gpu_does_not_depend_on_expert_tp(ep) -> None:
    """Grok-1, tp 4, s 4096: FLOP of the expert GEMMs per GPU equal for expert_tp 1 and 4;
    expert_fc1 is M = T·k·ep·etp/(E·tp) rows by 2F/etp (gated) columns."""
    tokens, tp = 4096, 4
    flops = {}
    for etp in (1, 4):
        shard = LayerShard(1, tokens, tp=tp, sequence_parallel=True, ep=ep, layer_index=0,
                           expert_tp=etp)
        kernels = _experts(shard)
        fc1 = kernels["expert_fc1"]
        assert (fc1.m, fc1.n, fc1.count) == (tokens * 2 * ep * etp // (8 * tp),
                                             2 * 32768 // etp, 8 // ep)
        flops[etp] = sum(k.total_flops for k in kernels.values())
    assert flops[1] == pytest.approx(flops[4], rel=1e-12)


def test_whole_experts_hold_tp_times_the_expert_parameters() -> None:
    dense4, expert4 = layer_params_local(GROK, 0, 4, 8)
    dense1, expert1 = layer_params_local(GROK, 0, 4, 8, etp=1)
    assert dense1 == dense4
    assert expert1 == pytest.approx(4 * expert4)
    assert expert1 == 3 * 6144 * 32768  # one whole gated expert per EP rank


@pytest.mark.parametrize(("tp", "etp", "shared", "scale"), [
    (4, None, 0, 2.0),     # top-2 routed tokens gathered over the tensor group
    (4, 1, 0, 0.0),        # whole experts: no tensor-parallel collective in the block
    (4, None, 1, 3.0),     # and a shared expert's own gather and scatter
    (4, 1, 1, 1.0),
])
def test_a_moe_blocks_tensor_collectives_carry_the_routed_tokens(tp, etp, shared, scale):
    model = model_from_mapping({"name": "m", "layers": 2, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 32000, "experts": 8, "top_k": 2,
                                "shared_experts": shared})
    parallel = ParallelConfig(tp=tp, dp=8, ep=8, expert_tp=etp, sequence_parallel=True)
    assert moe_tp_scale(model, parallel) == scale


def test_expert_tensor_groups_between_one_and_tp_gather_on_their_pairs() -> None:
    """tp 4, expert_tp 2, top-2: the MoE block's gathers run on tensor ranks {0, 1} and
    {2, 3} and carry top_k·etp/tp = 1 dense block's bytes; the attention's stay on all 4."""
    from distsim_gpu.workloads.cost.compute import RooflineCosts
    from distsim_gpu.workloads.iteration.ops import Collective
    from distsim_gpu.workloads.iteration.streams import StreamBuilder
    from distsim_gpu.workloads.specs.gpus import get_gpu
    from distsim_gpu.workloads.strategy.parallel import TrainingConfig

    model = model_from_mapping({"name": "m", "layers": 1, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 32000, "experts": 8, "top_k": 2})
    parallel = ParallelConfig(tp=4, dp=8, ep=4, expert_tp=2, sequence_parallel=True)
    training = TrainingConfig(micro_batch=1, global_batch=8)
    builder = StreamBuilder(model, parallel, training, RooflineCosts(get_gpu("a100-80gb")),
                            microbatches=1)
    gathers = {op.label: op for op in builder.stage_stream(0)
               if isinstance(op, Collective) and op.op == "all_gather"}
    dense = 512 * 1024 * 2
    assert gathers["L0 fwd mlp all_gather"].subgroups == ((0, 1), (2, 3))
    assert gathers["L0 fwd mlp all_gather"].size_bytes == dense * 2 * 2 / 4
    assert gathers["L0 fwd attention all_gather"].subgroups is None


def test_a_shared_experts_gather_stays_on_the_whole_tensor_group() -> None:
    """tp 4, expert_tp 2 with a shared expert: the routed tokens' gathers run on the
    expert-tensor pairs at top_k·etp/tp of a dense block's bytes, the shared expert's —
    a dense MLP's — on all 4 ranks at a dense block's; with expert_tp = tp both in one."""
    from distsim_gpu.workloads.cost.compute import RooflineCosts
    from distsim_gpu.workloads.iteration.ops import Collective
    from distsim_gpu.workloads.iteration.streams import StreamBuilder
    from distsim_gpu.workloads.specs.gpus import get_gpu
    from distsim_gpu.workloads.strategy.parallel import TrainingConfig

    model = model_from_mapping({"name": "m", "layers": 1, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 32000, "experts": 8, "top_k": 2,
                                "shared_experts": 1})
    dense = 512 * 1024 * 2

    def gathers(etp: int) -> dict[str, Collective]:
        parallel = ParallelConfig(tp=4, dp=8, ep=4 if etp == 2 else 2, expert_tp=etp,
                                  sequence_parallel=True)
        builder = StreamBuilder(model, parallel, TrainingConfig(micro_batch=1, global_batch=8),
                                RooflineCosts(get_gpu("a100-80gb")), microbatches=1)
        return {op.label: op for op in builder.stage_stream(0)
                if isinstance(op, Collective) and op.op == "all_gather"
                and op.label.startswith("L0 fwd mlp")}

    split = gathers(2)
    assert split["L0 fwd mlp all_gather"].subgroups == ((0, 1), (2, 3))
    assert split["L0 fwd mlp all_gather"].size_bytes == dense * 2 * 2 / 4
    assert split["L0 fwd mlp shared experts all_gather"].subgroups is None
    assert split["L0 fwd mlp shared experts all_gather"].size_bytes == dense
    whole = gathers(4)
    assert list(whole) == ["L0 fwd mlp all_gather"]
    assert whole["L0 fwd mlp all_gather"].size_bytes == dense * (2 + 1)
