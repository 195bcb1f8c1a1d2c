"""The frameworks' overlaps against closed forms on small cases: what each hides and what
it leaves exposed (docs/overlaps.md).

* ``overlap_param_gather``: the distributed optimizer's parameter all-gather by bucket
  during the forward instead of after the optimizer step;
* ``tp_comm_overlap``: each sequence-parallel TP collective pipelined with its GEMM;
* the interleaved schedule's gradient buckets launched per model chunk.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.compute.roofline import RooflineCosts
from distsim_gpu.workloads.cost.compute.stacks import CUDA_GRAPH_LAUNCH_S, get_stack
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.tp_overlap import (
    TE_PIPELINE_SMS,
    TE_PIPELINE_SPLITS,
    bulk_pair_s,
    chunked_operator_times_s,
    gemm_stretch,
    paired_gemms_s,
    pipelined_pair_s,
)
from distsim_gpu.workloads.cost.traffic import stage_param_bytes
from distsim_gpu.workloads.iteration.ops import Collective, TpOverlap, Wait
from distsim_gpu.workloads.iteration.simulator import IterationSpec, simulate_iteration
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
    parallel_from_mapping,
)
from hypothesis import given
from hypothesis import strategies as st

RING = CommParams(protocol="simple", algorithm="ring")


def _switch(gpus: int, bandwidth: str = "50 GB/s"):
    return build_cluster({"preset": "switch", "gpus": gpus, "link_bandwidth": bandwidth,
                          "link_latency": "1 us"})


# --------------------------------------------------------------------------- param gather


def _gather_case(uniform, *, overlap: bool, t_fwd_s: float = 1e-3):
    dp, m = 8, 2
    layer_params = uniform.model.layer_params(0)
    # One bucket per layer: each layer's gradients fill one exactly.
    parallel = ParallelConfig(dp=dp, zero=1, bucket_params=layer_params,
                              overlap_param_gather=overlap)
    iterations = type(uniform)(uniform.model, uniform.gpu, t_fwd_s=t_fwd_s)
    result = iterations.run(_switch(dp), parallel,
                            TrainingConfig(micro_batch=1, global_batch=dp * m), comm=RING)
    return result, parallel


def _gather_s(topo, size_bytes: float) -> float:
    return Communicator(Simulation(), topo, RING).estimate_s("all_gather", list(topo.gpus),
                                                             size_bytes)


def test_param_gather_overlapped_leaves_the_first_buckets_exposed(uniform):
    """The forward hides every bucket's gather but the first two: the one the embedding
    needs (the word and position embeddings) and the first layer's.  The final norm's
    gradients open the backward's first bucket, so it is gathered last, with the last
    layer's."""
    off, parallel = _gather_case(uniform, overlap=False)
    on, _ = _gather_case(uniform, overlap=True)
    topo = _switch(8)
    training = TrainingConfig(micro_batch=1, global_batch=16)
    total = stage_param_bytes(uniform.model, parallel, training, 0)
    layer = uniform.model.layer_params(0) * 2  # bf16
    first = total - uniform.model.layers * layer - uniform.model.final_norm_params() * 2
    hidden = _gather_s(topo, total) - _gather_s(topo, first) - _gather_s(topo, layer)
    assert hidden > 0
    assert off.iteration_time_s - on.iteration_time_s == pytest.approx(hidden, rel=1e-9)
    for gpu_off, gpu_on in zip(off.per_gpu, on.per_gpu, strict=True):
        assert gpu_off.compute_s == pytest.approx(gpu_on.compute_s, rel=1e-12)
        assert (gpu_off.exposed_communication_s - gpu_on.exposed_communication_s
                == pytest.approx(hidden, rel=1e-9))


def test_param_gather_with_a_short_forward_exposes_total_gather_minus_forward(uniform):
    """Layers faster than their bucket's gather: the forward waits for each bucket, and
    only the compute before the last bucket arrives (every layer but the last) is hidden."""
    t_fwd_s = 1e-5
    off, parallel = _gather_case(uniform, overlap=False, t_fwd_s=t_fwd_s)
    on, _ = _gather_case(uniform, overlap=True, t_fwd_s=t_fwd_s)
    topo, layers = _switch(8), uniform.model.layers
    total = stage_param_bytes(uniform.model, parallel, TrainingConfig(global_batch=16), 0)
    layer = uniform.model.layer_params(0) * 2
    # Bucket by bucket (each call its own latency) instead of one gather of everything.
    buckets_s = _gather_s(topo, total - layers * layer) + layers * _gather_s(topo, layer)
    exposed = buckets_s - (layers - 1) * t_fwd_s
    assert off.iteration_time_s - on.iteration_time_s == pytest.approx(
        _gather_s(topo, total) - exposed, rel=1e-9)


def test_param_gather_critical_path_still_adds_up(uniform):
    on, _ = _gather_case(uniform, overlap=True)
    assert sum(e.duration_s for e in on.critical_path) == pytest.approx(
        on.iteration_time_s, rel=1e-9)
    assert any(e.kind == "dp comm" for e in on.critical_path)
    for gpu in on.per_gpu:
        assert (gpu.compute_s + gpu.exposed_communication_s + gpu.bubble_s + gpu.idle_s
                == pytest.approx(on.iteration_time_s, rel=1e-9))


def test_param_gather_buckets_cover_the_stage_and_are_waited_for_per_chunk():
    model = model_from_mapping({"name": "m", "layers": 8, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 32000})
    par = ParallelConfig(pp=2, dp=2, zero=1, schedule="interleaved", interleave=2,
                         bucket_params=model.layer_params(0), overlap_param_gather=True)
    train = TrainingConfig(micro_batch=1, global_batch=8)
    costs = RooflineCosts(get_gpu("a100-80gb"))
    build = StreamBuilder(model, par, train, costs, microbatches=4)
    for stage in range(2):
        stream = build.stage_stream(stage)
        gathers = [o for o in stream if isinstance(o, Collective) and o.op == "all_gather"]
        # All launched before anything else runs, and nothing gathered after the step.
        assert stream[:len(gathers)] == gathers
        assert sum(g.size_bytes for g in gathers) == pytest.approx(
            stage_param_bytes(model, par, train, stage), rel=1e-12)
        waits = [o.handle for o in stream if isinstance(o, Wait) and o.handle]
        assert waits == [g.handle for g in gathers]  # each once, in launch order


def test_overlap_param_gather_needs_the_distributed_optimizer():
    with pytest.raises(ConfigError, match=r"parallelism\.overlap_param_gather.*zero 1 or 2"):
        model = model_from_mapping({"name": "m", "layers": 2, "hidden": 1024, "heads": 16,
                                    "seq_len": 512, "vocab": 32000})
        check_strategy(model, parallel_from_mapping({"dp": 2, "overlap_param_gather": True}),
                       TrainingConfig(global_batch=2), num_gpus=2)


def test_the_stack_overlaps_tp_with_context_parallelism():
    # NeMo's userbuffers presets include CP runs (tp 4 · cp 2 for Llama 3.1 405B and
    # Grok-1): the stack's default claims the overlap there too (the pairs' closed form
    # with a CP ring: tests/workloads/test_tp_overlap_layers.py).
    mapping = {"name": "cp", "cluster": {"preset": "dgx-h100", "nodes": 1},
               "model": {"name": "m", "layers": 2, "hidden": 1024, "heads": 16,
                         "seq_len": 512, "vocab": 32000},
               "parallelism": {"tp": 2, "cp": 2, "dp": 2, "sequence_parallel": True,
                               "zero": 1},
               "training": {"micro_batch": 1, "global_batch": 2},
               "compute": {"gpu": "h100-sxm", "stack": "nemo"}}
    parallel = scenario_from_mapping(mapping).parallel
    assert parallel.overlap_param_gather and parallel.tp_comm_overlap


def test_tp_overlap_is_refused_with_layer_groups():
    with pytest.raises(ConfigError, match=r"parallelism\.tp_comm_overlap.*layer_groups"):
        check_strategy(TP_MODEL, parallel_from_mapping(
            {"tp": 4, "sequence_parallel": True, "tp_comm_overlap": True,
             "layer_groups": [{"layers": 1, "tp": 4}, {"layers": 1, "tp": 2}]}),
            TrainingConfig(global_batch=1), num_gpus=4)


# --------------------------------------------------------------------------- TP overlap


@given(chunk_s=st.floats(1e-7, 1e-2), gemm_s=st.floats(1e-7, 1e-2),
       splits=st.integers(1, 64))
def test_pipelined_pair_is_the_longer_side_plus_a_chunk_of_the_other(chunk_s, gemm_s,
                                                                      splits):
    pair = pipelined_pair_s(chunk_s, gemm_s, splits)
    comm_s = splits * chunk_s
    longer, shorter = max(comm_s, gemm_s), min(comm_s, gemm_s)
    assert pair == pytest.approx(longer + shorter / splits, rel=1e-9)
    assert max(comm_s, gemm_s) <= pair * (1 + 1e-12)
    assert pair <= (comm_s + gemm_s) * (1 + 1e-12)


def test_gemm_stretch_is_the_share_of_sms_left():
    assert gemm_stretch(132, 16) == pytest.approx(132 / 116, rel=1e-15)
    assert gemm_stretch(132, 0) == 1.0
    with pytest.raises(ConfigError, match="tp_comm_overlap_sms"):
        gemm_stretch(132, 132)


TP_MODEL = model_from_mapping({"name": "tp", "layers": 2, "hidden": 4096, "heads": 32,
                               "seq_len": 2048, "vocab": 32000})


def _tp_run(overlap: bool, fold: bool = True):
    gpu = get_gpu("h100")
    par = ParallelConfig(tp=4, sequence_parallel=True, tp_comm_overlap=overlap)
    spec = IterationSpec(_switch(4, "100 GB/s"), TP_MODEL, par,
                         TrainingConfig(micro_batch=1, global_batch=1), RooflineCosts(gpu),
                         gpu, comm=RING, fold_exclusive_tp=fold)
    return simulate_iteration(spec)


def test_tp_overlap_pairs_are_the_pipeline_closed_form():
    """Per layer pass and block: the all-gather (ring exchange: tp chunks, no SMs) and,
    forward, the reduce-scatter (4 chunks, its GEMM stretched by 132/116) pipelined with
    their GEMMs, backward the reduce-scatter whole beside the weight gradient (bulk),
    instead of GEMMs and collectives one after the other."""
    off, on = _tp_run(False), _tp_run(True)
    costs = RooflineCosts(get_gpu("h100"))
    topo = _switch(4, "100 GB/s")
    comm = Communicator(Simulation(), topo, RING)
    size = 1 * 2048 * 4096 * 2

    def t(op: str, n: int) -> float:
        return comm.estimate_s(op, list(topo.gpus), size / n)

    stretch = 132 / 116
    delta = 0.0
    for layer in range(TP_MODEL.layers):
        shard = LayerShard(1, 2048, tp=4, sequence_parallel=True, layer_index=layer)
        for pass_ in ("fwd", "bwd"):
            whole = paired_gemms_s(costs, pass_, TP_MODEL, shard)
            chunked = paired_gemms_s(costs, pass_, TP_MODEL, shard, (4, 4))
            for (ag_s, rs_s), (ag_chunks_s, rs_chunks_s) in zip(whole.values(),
                                                                chunked.values(), strict=True):
                scatter = (bulk_pair_s(t("reduce_scatter", 1), rs_chunks_s)
                           if pass_ == "bwd" else
                           pipelined_pair_s(t("reduce_scatter", 4), rs_chunks_s * stretch, 4))
                pairs = pipelined_pair_s(t("all_gather", 4), ag_chunks_s, 4) + scatter
                delta += pairs - ag_s - rs_s - t("all_gather", 1) - t("reduce_scatter", 1)
                if pass_ == "bwd":
                    assert rs_chunks_s == rs_s  # the weight gradient runs whole
    assert delta < 0  # it hides something
    assert on.iteration_time_s - off.iteration_time_s == pytest.approx(delta, rel=1e-9)


def test_tp_overlap_as_flows_matches_its_closed_form_uncontended():
    folded, flows = _tp_run(True, fold=True), _tp_run(True, fold=False)
    assert flows.iteration_time_s == pytest.approx(folded.iteration_time_s, rel=1e-9)
    for a, b in zip(folded.per_gpu, flows.per_gpu, strict=True):
        assert a.compute_s == pytest.approx(b.compute_s, rel=1e-9)
        assert a.exposed_communication_s == pytest.approx(b.exposed_communication_s,
                                                          rel=1e-9)
    assert sum(e.duration_s for e in flows.critical_path) == pytest.approx(
        flows.iteration_time_s, rel=1e-9)


def test_tp_overlap_off_is_todays_stream():
    gpu = get_gpu("h100")
    train = TrainingConfig(micro_batch=1, global_batch=1)
    streams = []
    for overlap in (False, True):
        par = ParallelConfig(tp=4, sequence_parallel=True, tp_comm_overlap=overlap)
        streams.append(StreamBuilder(TP_MODEL, par, train, RooflineCosts(gpu),
                                     microbatches=1).stage_stream(0))
    assert not any(isinstance(o, TpOverlap) for o in streams[0])
    pairs = [o for o in streams[1] if isinstance(o, TpOverlap)]
    # Two collectives per block, two blocks, forward and backward, per layer.
    assert len(pairs) == 2 * 2 * 2 * TP_MODEL.layers
    assert {(p.comm.op, p.splits, p.comm_first, p.bulk) for p in pairs} == {
        ("all_gather", 4, True, False), ("reduce_scatter", 4, False, False),
        ("reduce_scatter", 1, False, True)}


def test_tp_comm_overlap_needs_sequence_parallelism():
    with pytest.raises(ConfigError, match=r"parallelism\.tp_comm_overlap.*sequence_parallel"):
        check_strategy(TP_MODEL, ParallelConfig(tp=4, tp_comm_overlap=True),
                       TrainingConfig(global_batch=1), num_gpus=4)


# --------------------------------------------------------------------------- grad buckets


def test_interleaved_chunks_launch_their_buckets_in_their_own_last_backward():
    """Without ``align_grad_reduce`` each model chunk's gradient buckets go out during that
    chunk's last backward, not after the stage's whole backward (with it:
    tests/workloads/test_megatron_ddp.py)."""
    model = model_from_mapping({"name": "m", "layers": 8, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 32000})
    par = ParallelConfig(pp=2, dp=2, zero=1, schedule="interleaved", interleave=2,
                         bucket_params=model.layer_params(0), align_grad_reduce=False)
    build = StreamBuilder(model, par, TrainingConfig(micro_batch=1, global_batch=8),
                          RooflineCosts(get_gpu("a100-80gb")), microbatches=4)
    stream = build.stage_stream(0)
    reduces = [i for i, o in enumerate(stream)
               if isinstance(o, Collective) and o.op == "reduce_scatter"]
    computes = [i for i, o in enumerate(stream)
                if getattr(o, "label", "").endswith("bwd mlp")]
    # Some buckets go out while backward compute is still to come (the other chunk's).
    assert reduces[0] < computes[-1]
    assert len(reduces) == 4 + 1  # a bucket per layer of the stage, and the embedding


# --------------------------------------------------------------------------- CUDA graphs


def test_cuda_graphs_leave_one_graph_launch_of_host_time():
    """A captured layer pass: its kernels back to back (no host time per kernel), or the
    graph's launch where the pass is shorter than that."""
    eager = get_stack("torch-eager")
    costs = RooflineCosts(get_gpu("h100"), stack=eager)
    graphed = RooflineCosts(get_gpu("h100"), stack=eager, cuda_graphs=True)
    for model, tokens in ((TP_MODEL, 2048), (TP_MODEL, 8)):
        shard = LayerShard(1, tokens, tp=4, sequence_parallel=True, layer_index=0)
        for pass_ in ("fwd", "bwd"):
            work = graphed.layer_work(pass_, model, shard)
            device_s = sum(graphed.kernel_time_s(k) for k in work.kernels)
            assert graphed.layer_time_s(pass_, model, shard) == pytest.approx(
                max(device_s, CUDA_GRAPH_LAUNCH_S), rel=1e-12)
            assert graphed.layer_time_s(pass_, model, shard) < costs.layer_time_s(
                pass_, model, shard)
    assert RooflineCosts(get_gpu("h100"), cuda_graphs=False).resolved_stack.cuda_graphs is False


# --------------------------------------------------------------------------- stack defaults


def _resolved_parallelism(tiny, **sections):
    return scenario_from_mapping(tiny(**sections)).resolved()["parallelism"]


def test_nemo_stack_turns_the_overlaps_on_where_the_strategy_has_them(tiny):
    sp = {"sequence_parallel": True, "zero": 1}
    nemo = _resolved_parallelism(tiny, parallelism=sp, compute={"stack": "nemo"})
    assert nemo["overlap_param_gather"] is True
    assert nemo["tp_comm_overlap"] is True
    assert (nemo["tp_comm_overlap_splits"], nemo["tp_comm_overlap_sms"]) == (
        TE_PIPELINE_SPLITS, TE_PIPELINE_SMS)
    # Megatron-Core's own defaults leave them off (and the resolved file unchanged).
    core = _resolved_parallelism(tiny, parallelism=sp)
    assert "overlap_param_gather" not in core
    assert "tp_comm_overlap" not in core
    # Without the distributed optimizer or sequence parallelism there is nothing to overlap.
    plain = _resolved_parallelism(tiny, compute={"stack": "nemo"})
    assert "overlap_param_gather" not in plain
    assert "tp_comm_overlap" not in plain
    # What the scenario says wins over the stack.
    said = _resolved_parallelism(tiny, parallelism={**sp, "tp_comm_overlap": False},
                                 compute={"stack": "nemo"})
    assert "tp_comm_overlap" not in said
    assert said["overlap_param_gather"] is True


def test_overlap_keys_are_checked_by_name(tiny):
    with pytest.raises(ConfigError, match=r"parallelism\.tp_comm_overlap_splits"):
        scenario_from_mapping(tiny(parallelism={"sequence_parallel": True,
                                                "tp_comm_overlap": True,
                                                "tp_comm_overlap_splits": 0}))
    with pytest.raises(ConfigError, match=r"compute\.cuda_graphs"):
        scenario_from_mapping(tiny(compute={"cuda_graphs": "yes"}))


def test_overlapped_runs_account_every_second(tiny):
    """Compute, exposed communication, bubble and idle still add up to the iteration, and
    so does the critical path.  (On this latency-bound toy the overlaps cost time: each
    chunk of a pipelined collective pays the collective's latency again.)"""
    sections = {"parallelism": {"sequence_parallel": True, "zero": 1}}
    core = run_scenario(scenario_from_mapping(tiny(**sections)))
    nemo = run_scenario(scenario_from_mapping(tiny(**sections, compute={"stack": "nemo"})))
    assert nemo.iteration_time_s > core.iteration_time_s
    for report in (core, nemo):
        for gpu in report.per_gpu:
            assert (gpu.compute_s + gpu.exposed_communication_s + gpu.bubble_s + gpu.idle_s
                    == pytest.approx(report.iteration_time_s, rel=1e-9))
        assert sum(e.duration_s for e in report.critical_path) == pytest.approx(
            report.iteration_time_s, rel=1e-9)


def test_chakra_export_refuses_tp_overlap_by_its_key():
    from distsim_gpu.workloads.traces.chakra_export import iter_rank_graphs
    gpu = get_gpu("h100")
    spec = IterationSpec(_switch(4), TP_MODEL,
                         ParallelConfig(tp=4, sequence_parallel=True, tp_comm_overlap=True),
                         TrainingConfig(micro_batch=1, global_batch=1), RooflineCosts(gpu),
                         gpu)
    with pytest.raises(ConfigError, match=r"parallelism\.tp_comm_overlap"):
        next(iter_rank_graphs(spec))


def test_a_gemm_cut_into_chunks_runs_each_slice_at_its_own_tiles_and_waves():
    # GPT-3's qkv on tp 4: 2,048 tokens x 9,216 x 12,288, its data gradient likewise; in 4
    # slices of 512 rows each fills fewer tiles per wave than the whole GEMM does.
    costs = RooflineCosts(get_gpu("h100-sxm"), launch_overhead_s=0.0)
    shard = LayerShard(1, 2048, tp=4, sequence_parallel=True)
    model = model_from_mapping({"name": "g", "layers": 1, "hidden": 12288, "heads": 96,
                                "seq_len": 2048, "vocab": 50257})
    work = costs.layer_work("bwd", model, shard)
    whole = costs.operator_times_s(work)
    assert chunked_operator_times_s(costs, work, {}, 2048) == whole
    chunked = chunked_operator_times_s(costs, work, {"qkv": 4}, 2048)
    for kernel in work.kernels:
        if kernel.base_name == "qkv" and kernel.kind == "gemm":
            piece = replace(kernel, m=512, flops=kernel.flops / 4,
                            bytes_moved=kernel.bytes_moved / 4)
            expected = (4 * costs.kernel_time_s(piece) if kernel.m == 2048
                        else costs.kernel_time_s(kernel))  # the weight gradient runs whole
            whole["qkv"] += expected - costs.kernel_time_s(kernel)
    assert chunked == pytest.approx(whole, rel=1e-12)
    assert chunked["qkv"] > costs.operator_times_s(work)["qkv"]
