"""FP8 delayed scaling's amax all-reduce (workloads.iteration.amax): after every forward
and backward of a model chunk, over the stage's GPUs, 4 bytes an amax — three a linear
layer after a forward, two after a backward — and nowhere a recipe keeps no history."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.scenarios.disruptions import spec_of
from distsim_gpu.scenarios.run_notes import amax_notes
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.compute.roofline import RooflineCosts
from distsim_gpu.workloads.cost.compute.stacks import get_stack
from distsim_gpu.workloads.iteration.amax import AmaxReduction, amax_reduction
from distsim_gpu.workloads.iteration.folding import _calls as stream_calls
from distsim_gpu.workloads.iteration.ops import Collective
from distsim_gpu.workloads.iteration.simulator import simulate_iteration
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

MODEL = model_from_mapping({"name": "m", "layers": 4, "hidden": 1024, "heads": 16,
                            "seq_len": 512, "vocab": 32000})


def _costs(stack: str = "megatron-core", precision: str = "fp8") -> RooflineCosts:
    return RooflineCosts(get_gpu("h100-sxm"), precision=precision, stack=get_stack(stack))


@pytest.mark.parametrize(("stack", "precision", "tp", "dp", "over", "group"), [
    ("megatron-core", "fp8", 2, 2, "stage", "dp"),   # the stage's tp·dp GPUs
    ("megatron-core", "fp8", 2, 1, "stage", "tp"),   # one replica: its tensor ranks
    ("megatron-core", "fp8", 1, 2, "stage", "dp"),
    ("megatron-core", "fp8", 1, 1, "stage", None),   # one GPU a stage: nobody to meet
    ("megatron-core", "fp8", 2, 2, "tp", "tp"),      # --tp-only-amax-red
    ("megatron-core", "fp8", 1, 2, "tp", None),
    ("megatron-core", "fp8", 2, 2, "none", None),    # reduce_amax=False
    ("megatron-core", "bf16", 2, 2, "stage", None),
    ("nemo", "fp8", 2, 2, "stage", "dp"),
    ("torch-compile", "fp8", 2, 2, "stage", None),   # current scaling: no amax history
    ("deepseek", "fp8", 2, 2, "stage", None),        # block scales: none either
])
def test_who_reduces_the_amaxes(stack, precision, tp, dp, over, group):
    reduction = amax_reduction(_costs(stack, precision), ParallelConfig(tp=tp, dp=dp), over)
    assert (reduction.group if reduction else None) == group


def test_every_chunks_forward_and_backward_end_with_one():
    """pp 2 × 2 chunks of one layer each, 4 micro-batches: on each stage one call after
    each of the 8 forwards and 8 backwards, 4 B × 3 × 4 linears after a forward and
    4 B × 2 × 4 after a backward (qkv, proj, fc1, fc2), blocking, among the replicas."""
    par = ParallelConfig(tp=2, pp=2, dp=2, schedule="interleaved", interleave=2)
    train = TrainingConfig(micro_batch=1, global_batch=8, precision="fp8")
    builder = StreamBuilder(MODEL, par, train, _costs(), microbatches=4)
    for stage in range(2):
        calls = [op for op in builder.stage_stream(stage)
                 if isinstance(op, Collective) and op.label.startswith("amax")]
        assert sorted(op.size_bytes for op in calls) == [32.0] * 8 + [48.0] * 8
        assert all(op.blocking and op.group == "dp" and op.op == "all_reduce"
                   for op in calls)


def test_a_moe_layer_counts_each_local_expert():
    """8 experts over ep 2: each rank's 4 experts hold 2 FP8 linears each, besides the
    attention's 2: a forward's call carries 4 B × 3 × 10 amaxes."""
    moe = model_from_mapping({"name": "moe", "layers": 1, "hidden": 1024, "heads": 16,
                              "seq_len": 512, "vocab": 32000, "experts": 8, "top_k": 2})
    par = ParallelConfig(tp=1, dp=2, ep=2)
    train = TrainingConfig(micro_batch=1, global_batch=2, precision="fp8")
    stream = StreamBuilder(moe, par, train, _costs(), microbatches=1).stage_stream(0)
    sizes = sorted(op.size_bytes for op in stream
                   if isinstance(op, Collective) and op.label.startswith("amax"))
    assert sizes == [4.0 * 2 * 10, 4.0 * 3 * 10]


def _tp2_dp4_fp8_s(tmp_path, tiny, write_scenario, over: str, batch: int) -> float:
    """The iteration time of the tiny model in FP8 on tp 2 · dp 4 H100s, ``global_batch``
    ``batch``, its amaxes reduced ``over``."""
    path = write_scenario(tmp_path / f"{over}-{batch}.yaml", tiny(
        training={"precision": "fp8", "global_batch": batch, "fp8_amax_reduction": over},
        parallelism={"tp": 2, "pp": 1, "dp": 4}, compute={"gpu": "h100-sxm"}))
    return run_scenario(load_scenario(path)).iteration_time_s


def test_the_calls_cost_a_latency_bound_all_reduce_each(tmp_path, tiny, write_scenario):
    """Each further micro-batch adds its two calls' closed forms; the last backward's
    call runs while the gradients' all-reduce does, and is hidden."""
    def iteration_s(over: str, batch: int) -> float:
        return _tp2_dp4_fp8_s(tmp_path, tiny, write_scenario, over, batch)

    added = {m: iteration_s("stage", 4 * m) - iteration_s("none", 4 * m) for m in (2, 3, 5)}
    # Per micro-batch: the closed forms of the forward's and the backward's call among a
    # tensor rank's four replicas, 4 layers × 4 FP8 linears × 3 and × 2 amaxes of 4 B.
    topology = build_cluster({"preset": "switch", "gpus": 8})
    comm = Communicator(Simulation(), topology, CommParams())
    lane = [topology.gpus[i] for i in (0, 2, 4, 6)]
    per_microbatch = sum(comm.estimate_s("all_reduce", lane, 4.0 * amaxes * 16)
                         for amaxes in (3, 2))
    assert 1e-6 < per_microbatch < 200e-6  # latency, not bandwidth
    assert added[3] - added[2] == pytest.approx(per_microbatch, rel=1e-4)
    assert added[5] - added[3] == pytest.approx(2 * per_microbatch, rel=1e-4)
    # The last backward's call runs beside the gradients' all-reduce, hidden.
    assert added[2] == pytest.approx(2 * per_microbatch - comm.estimate_s(
        "all_reduce", lane, 4.0 * 2 * 16), rel=1e-4)


def test_a_bad_reduction_group_is_refused(tmp_path, tiny, write_scenario):
    path = write_scenario(tmp_path / "s.yaml", tiny(
        training={"precision": "fp8", "fp8_amax_reduction": "world"},
        compute={"gpu": "h100-sxm"}))
    with pytest.raises(ConfigError, match=r"training\.fp8_amax_reduction") as error:
        load_scenario(path)
    assert "stage" in str(error.value)


def test_the_calls_keep_replicas_folded_and_the_fold_exact(tmp_path, tiny, write_scenario):
    """A latency-bound call puts no flow on a link, so it cannot tell replicas apart:
    four DGX H100 replicas still fold into one, and the folded run is the full one."""
    data = tiny(training={"precision": "fp8", "global_batch": 16},
                parallelism={"tp": 8, "pp": 1, "dp": 4}, compute={"gpu": "h100-sxm"})
    data["cluster"] = {"preset": "dgx-h100", "nodes": 4}
    spec = spec_of(load_scenario(write_scenario(tmp_path / "s.yaml", data)))
    folded, full = (simulate_iteration(replace(spec, fold_replicas=fold))
                    for fold in (True, False))
    assert folded.folding.startswith("folded 4"), folded.folding
    assert folded.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    without = replace(spec, training=replace(spec.training, fp8_amax_reduction="none"))
    assert simulate_iteration(without).iteration_time_s < folded.iteration_time_s


def test_folding_classes_replicas_by_the_calls_that_run_as_flows():
    """A latency-bound call runs no flow, so folding does not class replicas by its plans
    (a few hundred bytes take tree plans that differ between the replicas of a 2,048-GPU
    Grok-1 run, which then simulated three times the rank groups)."""
    amax = Collective("all_reduce", 48.0, "amax", group="dp", latency_bound=True)
    grads = Collective("all_reduce", 1e6, "grads", group="dp", blocking=False)
    assert stream_calls([amax, grads]) == {("dp", "all_reduce", 1e6)}


def test_among_the_tensor_ranks_the_call_is_fused_in_closed_form(tmp_path, tiny,
                                                                  write_scenario):
    """``fp8_amax_reduction: tp``: the call is a tensor-parallel one on links nothing else
    uses, timed in closed form with the compute around it; each further micro-batch adds
    the two calls' closed forms on a tensor-parallel pair."""
    assert AmaxReduction("tp").op("fwd", 4, "a") == Collective(
        "all_reduce", 48.0, "a", group="tp", latency_bound=True, exclusive=True)
    assert not AmaxReduction("dp").op("bwd", 4, "a").exclusive

    def iteration_s(over: str, batch: int) -> float:
        return _tp2_dp4_fp8_s(tmp_path, tiny, write_scenario, over, batch)

    added = {m: iteration_s("tp", 4 * m) - iteration_s("none", 4 * m) for m in (2, 3)}
    topology = build_cluster({"preset": "switch", "gpus": 8})
    comm = Communicator(Simulation(), topology, CommParams())
    pair = list(topology.gpus[:2])
    per_microbatch = sum(comm.estimate_s("all_reduce", pair, 4.0 * amaxes * 16)
                         for amaxes in (3, 2))
    assert added[3] - added[2] == pytest.approx(per_microbatch, rel=1e-4)


def test_a_cost_table_without_roofline_says_the_call_is_left_out():
    """A profiled table with no roofline fallback does not say the recipe, so no amax
    call runs; the run says so (none to say with the call off, in BF16, or on one GPU)."""
    fp8 = TrainingConfig(precision="fp8")
    par = ParallelConfig(tp=2, dp=2)
    [note] = amax_notes(fp8, object(), par)
    assert note.kind == "unmodelled" and note.key == "training.fp8_amax_reduction"
    assert amax_notes(fp8, _costs(), par) == []  # the roofline says: the call runs
    assert amax_notes(replace(fp8, fp8_amax_reduction="none"), object(), par) == []
    assert amax_notes(TrainingConfig(precision="bf16"), object(), par) == []
    assert amax_notes(fp8, object(), ParallelConfig()) == []
