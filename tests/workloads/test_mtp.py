"""Multi-token prediction (``model.mtp_depth``): its parameters, and its cost on the last
pipeline stage — one more block like the last layer, the projection and the loss again."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.compute import RooflineCosts
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.parameters import Chunking, params_on_gpu
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import get_model, model_from_mapping
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

DSV3 = get_model("deepseek-v3")
EMBEDDING = Chunking(partition="embedding")  # 61 layers do not split into 4 equal stages


def test_one_module_is_a_last_layer_a_projection_and_two_norms() -> None:
    with_mtp = replace(DSV3, mtp_depth=1)
    module = DSV3.layer_params(60) + 2 * 7168**2 + 2 * 7168
    assert with_mtp.total_params() - DSV3.total_params() == module
    assert module == pytest.approx(11.61e9, rel=1e-3)  # the report: 671B + the MTP module
    # On the last stage only, its experts split over ep like a layer's.
    base = params_on_gpu(DSV3, pp=4, ep=8, stage=3, chunking=EMBEDDING)
    more = params_on_gpu(with_mtp, pp=4, ep=8, stage=3, chunking=EMBEDDING)
    assert more.expert - base.expert == pytest.approx(256 / 8 * DSV3.mlp_params())
    first = {"pp": 4, "ep": 8, "stage": 0, "chunking": EMBEDDING}
    assert params_on_gpu(with_mtp, **first) == params_on_gpu(DSV3, **first)


def test_the_modules_run_on_the_last_stage(uniform) -> None:
    """pp 2, 4 micro-batches: the last stage runs, per micro-batch, one more layer pass
    each way and the loss once more; the iteration grows by at least that much."""
    model = model_from_mapping({"name": "m", "layers": 4, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 32000, "experts": 8, "top_k": 2})
    costs = RooflineCosts(get_gpu("a100-80gb"))
    topology = build_cluster({"preset": "dgx-a100", "nodes": 1})
    parallel = ParallelConfig(tp=2, pp=2, dp=2, ep=2, sequence_parallel=True)
    training = TrainingConfig(micro_batch=1, global_batch=8)
    times = [uniform.run(topology, parallel, training, comm=CommParams(), costs=costs,
                         model=replace(model, mtp_depth=depth)).iteration_time_s
             for depth in (0, 1)]
    shard = LayerShard(1, 512, tp=2, sequence_parallel=True, ep=2, layer_index=3)
    layer_s = costs.layer_time_s("fwd", model, shard) + costs.layer_time_s("bwd", model, shard)
    loss_s = sum(costs.loss_time_s(p, model, micro_batch=1, seq_len=512, tp=2,
                                   sequence_parallel=True) for p in ("fwd", "bwd"))
    assert times[1] - times[0] >= 4 * (layer_s + loss_s) * 0.99


def test_mtp_needs_gemm_costs() -> None:
    from distsim_gpu.workloads.cost.mtp import mtp_projection_s

    with pytest.raises(ConfigError, match=r"model\.mtp_depth: multi-token prediction"):
        mtp_projection_s(object(), DSV3, tokens=4096, tp=1, pass_="fwd")


def test_mtp_with_fsdp_is_refused() -> None:
    from distsim_gpu.workloads.strategy.parallel import check_strategy

    model = replace(model_from_mapping({"name": "m", "layers": 4, "hidden": 1024,
                                        "heads": 16, "seq_len": 512, "vocab": 32000}),
                    mtp_depth=1)
    with pytest.raises(ConfigError, match=r"model\.mtp_depth: multi-token prediction with "
                                          r"ZeRO-3/FSDP is not modelled"):
        check_strategy(model, ParallelConfig(dp=2, fsdp=True), TrainingConfig(global_batch=2),
                       num_gpus=2)


SMALL_MOE = model_from_mapping({"name": "m", "layers": 4, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 32000, "experts": 8, "top_k": 2})


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_each_module_holds_a_last_layer_and_the_head_once_more(recompute) -> None:
    """On the last stage of pp 2 (2 micro-batches in flight under 1F1B with 4), per
    module and micro-batch: the last layer's activations, the norms' and projection's
    inputs (4·s·b·h bytes of 16-bit, /t with s.p.) and the head's (2·s·b·h/t + fp32
    logits 4·s·b·V/t); the first stage does not move."""
    from distsim_gpu.workloads.cost.memory import activation_bytes_per_layer, memory_per_gpu

    parallel = ParallelConfig(tp=2, pp=2, dp=2, ep=2, sequence_parallel=True)
    training = TrainingConfig(micro_batch=1, global_batch=8, recompute=recompute)

    def activations(depth: int, stage: int) -> float:
        return memory_per_gpu(replace(SMALL_MOE, mtp_depth=depth), parallel, training,
                              stage=stage, num_microbatches=4).activations_bytes

    shard = LayerShard(1, 512, tp=2, sequence_parallel=True, ep=2, layer_index=3,
                       recompute=recompute)
    layer = activation_bytes_per_layer(SMALL_MOE, shard)
    sbh = 512 * 1024
    module = layer + 2 * 4 * sbh / 2 + 2 * 2 * sbh / 2 + 4 * 512 * 32000 / 2
    in_flight = 1  # 1F1B's last stage holds one micro-batch
    assert activations(2, 1) - activations(0, 1) == pytest.approx(2 * module * in_flight)
    assert activations(2, 0) == activations(0, 0)


def test_a_v_schedule_keeps_the_logits_on_its_first_stage() -> None:
    """DualPipeV places the output layer on stage 0 (the V's end): a larger vocabulary
    grows that stage's activations by the fp32 logits, 4·s·b·ΔV/t per micro-batch of its
    last chunk held — one: stage 0's program (pp 2, 6 micro-batches) holds at most three
    first-chunk forwards and one last-chunk forward, whose backward follows at once — and
    not the last stage's."""
    from distsim_gpu.workloads.cost.memory import memory_per_gpu

    model = model_from_mapping({"name": "m", "layers": 8, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 32000})
    parallel = ParallelConfig(pp=2, dp=1, interleave=2, schedule="dualpipev")
    training = TrainingConfig(micro_batch=1, global_batch=6)

    def activations(vocab: int, stage: int) -> float:
        return memory_per_gpu(replace(model, vocab=vocab), parallel, training, stage=stage,
                              num_microbatches=6).activations_bytes

    assert activations(64000, 0) - activations(32000, 0) == pytest.approx(
        4 * 512 * 32000 * 1)
    assert activations(64000, 1) == activations(32000, 1)
