"""``tp_comm_overlap`` beyond a dense layer without context parallelism, against the
pipeline's closed form (docs/overlaps.md): the attention block of a MoE layer (its MLP
keeps the token dispatcher's collectives whole), a layer whose core attention runs around
the context-parallel ring (its gather before the ring, its scatter after), NVIDIA's Grok-1
shape with both; MLA's attention, which has no input GEMM for its gather (nor its
scatter backward); a split
backward's input half, which keeps its collectives whole; and what lets the TP collectives
fold into closed form beside a context-parallel ring (no stream holds one inside a ring
step, and a ring's sends do not end the folding)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.scenarios.run_notes import tp_overlap_notes
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.compute.roofline import RooflineCosts
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.tp_overlap import bulk_pair_s, paired_gemms_s, pipelined_pair_s
from distsim_gpu.workloads.iteration.ops import Collective, TpOverlap, Wait
from distsim_gpu.workloads.iteration.run_hints import RunHints
from distsim_gpu.workloads.iteration.simulator import IterationSpec, simulate_iteration
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import ModelSpec, model_from_mapping
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig, check_strategy
from hypothesis import given, settings
from hypothesis import strategies as st

RING = CommParams(protocol="simple", algorithm="ring")
GPU = get_gpu("h100")
COSTS = RooflineCosts(GPU)
DENSE = model_from_mapping({"name": "dense", "layers": 2, "hidden": 4096, "heads": 32,
                            "seq_len": 4096, "vocab": 32000})
MOE = model_from_mapping({"name": "moe", "layers": 2, "hidden": 4096, "heads": 32,
                          "kv_heads": 8, "seq_len": 4096, "vocab": 32000,
                          "ffn_hidden": 8192, "experts": 4, "top_k": 2})
STRETCH = 132 / 116  # the reduce-scatter's 16 SMs of an H100's 132


def _switch(gpus: int):
    return build_cluster({"preset": "switch", "gpus": gpus, "link_bandwidth": "100 GB/s",
                          "link_latency": "1 us"})


def _run(model: ModelSpec, overlap: bool, **dims: int) -> float:
    # One gradient bucket, reduced once the backward is over: the replicas' (or CP
    # ranks') reduction then starts later or earlier by exactly what the pairs change.
    par = ParallelConfig(tp=2, sequence_parallel=True, tp_comm_overlap=overlap,
                         bucket_params=10**12, **dims)
    train = TrainingConfig(micro_batch=1, global_batch=dims.get("dp", 1))
    gpus = 2 * dims.get("cp", 1) * dims.get("dp", 1)
    check_strategy(model, par, train, num_gpus=gpus)
    spec = IterationSpec(_switch(gpus), model, par, train, COSTS, GPU, comm=RING)
    return simulate_iteration(spec).iteration_time_s


def _hidden_s(model: ModelSpec, blocks: tuple[str, ...], cp: int = 1, ep: int = 1) -> float:
    """What the pairs change in one iteration (one micro-batch): per layer, pass and
    paired block, the pipelines ``c + (n − 1)·max(c, g) + g`` (a backward's scatter:
    ``max(c, g)`` beside the weight gradient) in place of the whole GEMMs and whole
    collectives, on the layer at ``s/cp`` tokens."""
    topo = _switch(2)
    comm = Communicator(Simulation(), topo, RING)
    tokens = model.seq_len // cp
    size = tokens * model.hidden * 2

    def t(op: str, n: int) -> float:
        return comm.estimate_s(op, list(topo.gpus), size / n)

    delta = 0.0
    for layer in range(model.layers):
        shard = LayerShard(1, tokens, tp=2, sequence_parallel=True, layer_index=layer, ep=ep)
        for pass_ in ("fwd", "bwd"):
            whole = paired_gemms_s(COSTS, pass_, model, shard)
            chunked = paired_gemms_s(COSTS, pass_, model, shard, (2, 4))
            for block in blocks:
                (ag_s, rs_s), (ag_chunks_s, rs_chunks_s) = whole[block], chunked[block]
                scatter = (bulk_pair_s(t("reduce_scatter", 1), rs_chunks_s)
                           if pass_ == "bwd" else
                           pipelined_pair_s(t("reduce_scatter", 4), rs_chunks_s * STRETCH, 4))
                pairs = pipelined_pair_s(t("all_gather", 2), ag_chunks_s, 2) + scatter
                delta += pairs - ag_s - rs_s - t("all_gather", 1) - t("reduce_scatter", 1)
    return delta


@pytest.mark.parametrize(("model", "dims", "blocks"), [
    (DENSE, {"cp": 2}, ("attention", "mlp")),
    (MOE, {"dp": 2, "ep": 2}, ("attention",)),
    (MOE, {"cp": 2, "ep": 2}, ("attention",)),  # Grok-1's recipe: EP folded over CP
], ids=["dense-cp", "moe", "moe-cp"])
def test_pairs_are_the_pipeline_closed_form(model, dims, blocks):
    delta = _hidden_s(model, blocks, cp=dims.get("cp", 1), ep=dims.get("ep", 1))
    assert delta < 0  # on this NVLink-class switch the pairs hide communication
    assert _run(model, True, **dims) - _run(model, False, **dims) == pytest.approx(
        delta, rel=1e-9)


def _stream(model: ModelSpec, **dims: int) -> tuple:
    par = ParallelConfig(tp=2, sequence_parallel=True, tp_comm_overlap=True, **dims)
    train = TrainingConfig(micro_batch=1, global_batch=dims.get("dp", 1))
    return StreamBuilder(model, par, train, COSTS, microbatches=1).stage_stream(0)


def test_a_moe_layer_pairs_its_attention_and_keeps_the_dispatchers_collectives():
    stream = _stream(MOE, dp=2, ep=2)
    pairs = [op for op in stream if isinstance(op, TpOverlap)]
    # Two pairs per attention block, forward and backward, per layer; no MLP pair.
    assert len(pairs) == 2 * 2 * MOE.layers
    assert all(" attention " in op.comm.label for op in pairs)
    plain = [op for op in stream if isinstance(op, Collective) and op.group == "tp"]
    assert plain and all(" mlp " in op.label for op in plain)


def test_context_parallel_attention_gathers_before_its_ring_and_scatters_after():
    stream = [getattr(op, "label", "") for op in _stream(DENSE, cp=2)]
    gather = stream.index("L0 fwd attention all_gather overlapped")
    ring = [i for i, label in enumerate(stream) if label.startswith("L0 fwd cp ring")]
    scatter = stream.index("L0 fwd attention reduce_scatter overlapped")
    assert ring and gather < min(ring) and max(ring) < scatter
    assert "L0 fwd mlp all_gather overlapped" in stream


@pytest.mark.parametrize("overlap", [False, True])
def test_a_context_parallel_rings_sends_leave_the_tp_collectives_folded(overlap):
    """Exclusive TP collectives fold until the stage launches its first data-parallel
    collective; a CP ring's sends (checked against the TP links by ``exclusive_tp``) do
    not count as one.  They did: every pass after the first ran its TP collectives as
    flows, about 5 times the events of Llama 3.1 405B's rows for the same iteration."""
    hints = RunHints(exclusive_tp=True, tp_time_s=lambda op, size, stage: 1e-3)

    def unfolded(cp: int) -> int:
        par = ParallelConfig(tp=2, sequence_parallel=True, tp_comm_overlap=overlap, cp=cp,
                             dp=2)
        train = TrainingConfig(micro_batch=1, global_batch=8)
        stream = StreamBuilder(DENSE, par, train, COSTS, microbatches=4,
                               hints=hints).stage_stream(0)
        return sum(1 for op in stream if isinstance(op, TpOverlap)
                   or (isinstance(op, Collective) and op.group == "tp"))

    # Only the last backward, which launches the gradients' reduction, runs them as flows.
    assert unfolded(2) == unfolded(1) > 0


def test_mla_attention_pairs_only_its_output_projection():
    # MLA's down-projections take the gathered input and have no ``qkv`` GEMM: forward the
    # gather runs whole and the scatter against the output projection; backward the
    # gradient's gather runs against the output projection's and the scatter whole.
    mla = model_from_mapping({"name": "mla", "layers": 1, "hidden": 2048, "heads": 16,
                              "seq_len": 2048, "vocab": 32000, "attention_bias": False,
                              "mla": {"q_lora_rank": 512, "kv_lora_rank": 256,
                                      "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
                                      "v_head_dim": 64}})
    kinds = {(op.label.split()[1], type(op).__name__,
              op.comm.op if isinstance(op, TpOverlap) else op.op)
             for op in _stream(mla) if isinstance(op, (Collective, TpOverlap))
             and " attention " in op.label}
    assert kinds == {("fwd", "Collective", "all_gather"), ("fwd", "TpOverlap", "reduce_scatter"),
                     ("bwd", "TpOverlap", "all_gather"), ("bwd", "Collective", "reduce_scatter")}


def test_a_split_backwards_input_half_keeps_its_collectives_whole():
    par = ParallelConfig(tp=2, pp=2, sequence_parallel=True, tp_comm_overlap=True,
                         schedule="dualpipe", interleave=2)
    train = TrainingConfig(micro_batch=1, global_batch=4)
    builder = StreamBuilder(DENSE, par, train, COSTS, microbatches=4)
    input_half = builder.pass_ops(0, 0, "I", last=False, fold=False)
    whole = builder.pass_ops(0, 0, "B", last=False, fold=False)
    assert not any(isinstance(op, TpOverlap) for op in input_half)
    assert any(isinstance(op, Collective) and op.group == "tp" for op in input_half)
    assert any(isinstance(op, TpOverlap) for op in whole)


def test_moe_overlap_is_refused_with_context_parallelism():
    with pytest.raises(ConfigError, match=r"parallelism\.moe_overlap.*context"):
        check_strategy(MOE, ParallelConfig(tp=2, cp=2, ep=2, sequence_parallel=True,
                                           moe_overlap=True),
                       TrainingConfig(global_batch=1), num_gpus=4)


def test_a_run_says_when_its_scatter_pipelines_take_transformer_engines_default():
    on = ParallelConfig(tp=2, sequence_parallel=True, tp_comm_overlap=True)
    [note] = tp_overlap_notes(on, None)
    assert note.key == "parallelism.tp_comm_overlap_sms" and "4 chunks on 16 SMs" in note.message
    assert tp_overlap_notes(ParallelConfig(tp=2, sequence_parallel=True), None) == []
    assert tp_overlap_notes(ParallelConfig(tp=2, sequence_parallel=True, tp_comm_overlap=True,
                                           tp_comm_overlap_sms=24), None) == []


def test_a_stacks_tp_overlap_gives_way_to_forward_backward_pairs(write_scenario, tmp_path):
    """NeMo's stack runs TP overlap where sequence parallelism allows it, but distsim does
    not run it beside fb_overlap's pairs: a run that asks for the pairs and leaves the TP
    overlap to the stack runs without it and says so; one that asks for both is refused."""
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    spec = {"name": "pairs", "cluster": {"preset": "dgx-h100", "nodes": 1},
            "model": {"name": "m", "layers": 4, "hidden": 1024, "heads": 16,
                      "seq_len": 1024, "vocab": 32000, "experts": 8, "top_k": 2},
            "parallelism": {"tp": 2, "dp": 4, "ep": 4, "sequence_parallel": True,
                            "fb_overlap": True},
            "training": {"micro_batch": 1, "global_batch": 8},
            "compute": {"gpu": "h100-sxm", "costs": "roofline", "stack": "nemo"}}
    scenario = load_scenario(write_scenario(tmp_path / "pairs.yaml", spec))
    assert scenario.parallel.fb_overlap and not scenario.parallel.tp_comm_overlap
    notes = [n for n in run_scenario(scenario).notes if n.key == "parallelism.tp_comm_overlap"]
    assert len(notes) == 1 and notes[0].kind == "unmodelled"
    assert "the nemo stack runs userbuffers' TP overlap" in notes[0].message
    both = {**spec, "parallelism": {**spec["parallelism"], "tp_comm_overlap": True}}
    with pytest.raises(ConfigError, match=r"fb_overlap with tp_comm_overlap is not modelled"):
        load_scenario(write_scenario(tmp_path / "both.yaml", both))


_MLA = model_from_mapping({"name": "mla", "layers": 2, "hidden": 2048, "heads": 16,
                           "seq_len": 4096, "vocab": 32000, "ffn_hidden": 4096,
                           "experts": 4, "top_k": 2, "attention_bias": False,
                           "mla": {"q_lora_rank": 512, "kv_lora_rank": 256,
                                   "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                                   "v_head_dim": 128}})


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from([DENSE, MOE, _MLA]), tp=st.sampled_from([2, 4]),
       cp=st.sampled_from([2, 4]), overlap=st.booleans(),
       recompute=st.sampled_from(["none", "selective", "full"]),
       schedule=st.sampled_from([("1f1b", 1), ("interleaved", 2), ("dualpipev", 2)]))
def test_no_stream_holds_a_tp_collective_inside_a_ring_step(model, tp, cp, overlap, recompute,
                                                             schedule):
    """What lets a ring's sends share their own members' TP links with closed-form TP
    collectives (``folding.exclusive_tp``): between a ring step's launch and its wait a
    rank group runs compute only."""
    model = replace(model, layers=4)  # two chunks on each of two stages
    ep = 2 if model.experts > 1 else 1
    par = ParallelConfig(tp=tp, cp=cp, ep=ep, pp=2, sequence_parallel=True,
                         tp_comm_overlap=overlap, schedule=schedule[0],
                         interleave=schedule[1])
    train = TrainingConfig(micro_batch=1, global_batch=8, recompute=recompute)
    check_strategy(model, par, train, num_gpus=tp * cp * 2)
    builder = StreamBuilder(model, par, train, COSTS, microbatches=8)
    for stage in range(par.pp):
        open_steps: set = set()
        for op in builder.stage_stream(stage):
            if isinstance(op, Collective) and op.group == "cp":
                open_steps.add(op.handle)
            elif isinstance(op, Wait):
                open_steps.discard(op.handle)
            elif isinstance(op, TpOverlap) or (isinstance(op, Collective) and op.group == "tp"):
                assert not open_steps, op.label
        assert not open_steps
