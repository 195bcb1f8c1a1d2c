"""Typed ops and the streams the builder makes of a strategy: closed-form counts and order."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.memory import layer_params_local, params_on_gpu
from distsim_gpu.workloads.iteration.ops import (
    Barrier,
    Collective,
    Compute,
    Fused,
    Memcpy,
    Recv,
    Send,
    Wait,
    fuse,
)
from distsim_gpu.workloads.iteration.run_hints import RunHints
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from distsim_gpu.workloads.strategy.schedule import stage_program

MODEL = model_from_mapping({"name": "small", "layers": 8, "hidden": 1024, "heads": 16,
                            "seq_len": 512, "vocab": 32000})
LAYER_S = {"fwd": 1e-3, "bwd": 2e-3, "recompute": 1e-3}
EDGE_S = {"embedding": 1e-5, "loss": 3e-5}
OPTIMIZER_S = 7e-4


class Costs:
    """Layers by pass, distinct embedding and loss times, a fixed optimizer step."""

    def layer_time_s(self, pass_, model, _shard):
        return LAYER_S[pass_]

    def embedding_time_s(self, pass_, model, **_shard):
        return EDGE_S["embedding"]

    def loss_time_s(self, pass_, model, **_shard):
        return EDGE_S["loss"]

    def optimizer_step_time_s(self, params_on_gpu):
        return OPTIMIZER_S


def builder(m: int = 8, *, recompute: str = "none", tp_time_s=None, exclusive_tp=False,
            **parallel) -> StreamBuilder:
    par = ParallelConfig(**{"tp": 2, "pp": 4, "dp": 2, **parallel})
    train = TrainingConfig(micro_batch=1, global_batch=m * par.dp, recompute=recompute)
    return StreamBuilder(MODEL, par, train, Costs(), microbatches=m,
                         hints=RunHints(exclusive_tp=exclusive_tp, tp_time_s=tp_time_s))


def flat(stream):
    """The stream with every Fused op opened up into its steps."""
    for op in stream:
        if isinstance(op, Fused):
            yield from op.steps
        else:
            yield op


def computes(stream, pass_name):
    return [op for op in flat(stream) if isinstance(op, Compute) and op.pass_name == pass_name
            and op.layer == "transformer_layer"]


# --------------------------------------------------------------------------- the types


EXAMPLES = [
    Compute(1e-3, "L0 fwd attention", "transformer_layer", "fwd", 0),
    Memcpy(2e-6, "Memcpy HtoD", memset=False),
    Collective("all_reduce", 4096.0, "L0 fwd mlp all_reduce", exclusive=True),
    Collective("all_reduce", 1024, "nccl", group=(0, 1, 2, 3)),
    Send("F", 3, 2, 1e6),
    Recv("B", 3, 1),
    Wait("L4"),
    Barrier("gradient norm"),
    Fused((Compute(1e-3, "a"), Collective("all_reduce", 8.0, "b", exclusive=True)),
          (1e-3, 5e-6), 1e-3, 5e-6),
]


@pytest.mark.parametrize("op", EXAMPLES, ids=lambda op: type(op).__name__)
def test_ops_are_frozen_hashable_values(op):
    first = dataclasses.fields(op)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(op, first, None)
    twin = dataclasses.replace(op)
    assert twin == op and hash(twin) == hash(op) and twin is not op
    assert len({op, twin}) == 1
    assert not hasattr(op, "__dict__")  # slotted


def test_compute_trace_args_are_the_cost_table_keys_in_order():
    assert list(EXAMPLES[0].trace_args().items()) == [
        ("layer", "transformer_layer"), ("pass", "fwd"), ("index", 0)]
    assert Compute(1.0, "embedding fwd", "embedding", "fwd").trace_args() == {
        "layer": "embedding", "pass": "fwd"}
    assert Compute(1.0, "optimizer step").trace_args() == {}


def test_labels_of_a_receive_and_a_fused_run():
    assert Recv("F", 2, 5).label == "activation mb2 to virtual stage 5"
    assert Recv("B", 0, 1).label == "gradient mb0 to virtual stage 1"
    assert EXAMPLES[-1].label == "a … b"
    assert Fused((Compute(1.0, "only"),), (1.0,), 1.0, 0.0).label == "only"


# --------------------------------------------------------------------------- counts


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("pp", "m"), [(2, 1), (4, 4), (4, 8), (8, 16)])
def test_each_stage_computes_every_layer_of_every_micro_batch_once(schedule, pp, m):
    build = builder(m, pp=pp, schedule=schedule)
    layers = MODEL.layers // pp
    for stage in range(pp):
        stream = build.stage_stream(stage)
        for pass_name in ("fwd", "bwd"):
            blocks = computes(stream, pass_name)
            # Attention and MLP halves of each layer, every micro-batch.
            assert len(blocks) == 2 * m * layers
            assert sum(c.duration_s for c in blocks) == pytest.approx(
                m * layers * LAYER_S[pass_name], rel=1e-12)
            assert Counter(c.layer_index for c in blocks) == {
                layer: 2 * m for layer in range(stage * layers, (stage + 1) * layers)}
        assert computes(stream, "recompute") == []
        edges = Counter(op.label for op in flat(stream)
                        if isinstance(op, Compute) and op.layer in ("embedding", "loss"))
        expected = Counter()
        if stage == 0:
            expected.update({"embedding fwd": m, "embedding bwd": m})
        if stage == pp - 1:
            expected.update({"loss fwd": m, "loss bwd": m})
        assert edges == expected


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_sends_and_receives_per_stage(schedule):
    pp, m = 4, 8
    build = builder(m, pp=pp, schedule=schedule)
    size = 1 * MODEL.seq_len * MODEL.hidden * 2 / 2  # tokens·hidden·bf16 / tp
    for stage in range(pp):
        stream = build.stage_stream(stage)
        sends = [op for op in stream if isinstance(op, Send)]
        recvs = [op for op in stream if isinstance(op, Recv)]
        forward_out = m if stage < pp - 1 else 0
        backward_out = m if stage > 0 else 0
        assert Counter(s.pass_name for s in sends) == Counter(
            {"F": forward_out, "B": backward_out}) - Counter()
        assert all(s.virtual_stage == (stage + 1 if s.pass_name == "F" else stage - 1)
                   for s in sends)
        assert all(s.size_bytes == size for s in sends)
        # Every receive is for this stage, one per incoming activation and gradient.
        assert Counter(r.pass_name for r in recvs) == Counter(
            {"F": backward_out, "B": forward_out}) - Counter()
        assert {r.virtual_stage for r in recvs} <= {stage}
        assert sorted(r.microbatch for r in recvs if r.pass_name == "F") == (
            list(range(m)) if stage > 0 else [])


@pytest.mark.parametrize(("sequence_parallel", "per_block"), [(False, 1), (True, 2)])
def test_tensor_parallel_collectives_follow_every_attention_and_mlp_block(
        sequence_parallel, per_block):
    m, pp = 4, 2
    build = builder(m, pp=pp, sequence_parallel=sequence_parallel, recompute="full")
    layers = MODEL.layers // pp
    stream = build.stage_stream(0)
    tp = [op for op in flat(stream) if isinstance(op, Collective) and op.group == "tp"]
    # fwd, bwd and the full recompute: two blocks each, per layer and micro-batch.
    assert len(tp) == 3 * 2 * per_block * m * layers
    assert {op.size_bytes for op in tp} == {MODEL.seq_len * MODEL.hidden * 2}
    kinds = Counter(op.op for op in tp)
    assert kinds == ({"all_gather": len(tp) // 2, "reduce_scatter": len(tp) // 2}
                     if sequence_parallel else {"all_reduce": len(tp)})
    assert len(computes(stream, "recompute")) == 2 * m * layers


def _params(layers: range) -> float:
    return sum(sum(layer_params_local(MODEL, layer, 2, 1)) for layer in layers)


GRAD_BYTES = 4  # ParallelConfig's default: gradients reduced in fp32
EMBEDDING_GRAD_BYTES = MODEL.vocab * MODEL.hidden / 2 * GRAD_BYTES  # tp 2
# Reduced over the data-parallel group with the first chunk: the word embedding's share
# and the learned position embedding; with the last: the final norm and, on a stage
# without the word embedding, the tied output layer's copy of it.
ENTRY_GRAD_BYTES = EMBEDDING_GRAD_BYTES + MODEL.seq_len * MODEL.hidden * GRAD_BYTES
FINAL_NORM_GRAD_BYTES = 2 * MODEL.hidden * GRAD_BYTES  # LayerNorm's weight and bias
HEAD_GRAD_BYTES = FINAL_NORM_GRAD_BYTES + EMBEDDING_GRAD_BYTES


@pytest.mark.parametrize("zero", [0, 1])
def test_data_parallel_buckets_in_the_last_backward(zero):
    m, pp = 4, 2
    layers = MODEL.layers // pp
    per_layer = _params(range(1))
    op = "reduce_scatter" if zero else "all_reduce"
    # A bucket of one layer's parameters: one call per layer (+ the embeddings' on stage
    # 0); the last stage's first bucket opens with its output layer's and final norm's.
    small = builder(m, pp=pp, zero=zero, bucket_params=per_layer)
    for stage in range(pp):
        stream = small.stage_stream(stage)
        calls = [o for o in stream if isinstance(o, Collective) and not o.blocking]
        assert [c.op for c in calls] == [op] * (layers + (stage == 0))
        assert all(c.group == "dp" and c.handle is None for c in calls)
        head = HEAD_GRAD_BYTES if stage == pp - 1 else 0.0
        assert [c.size_bytes for c in calls[:layers]] == pytest.approx(
            [per_layer * GRAD_BYTES + head] + [per_layer * GRAD_BYTES] * (layers - 1))
        if stage == 0:
            assert calls[-1].size_bytes == pytest.approx(ENTRY_GRAD_BYTES)
        # Launched by the last micro-batch's backward: after every other backward.
        first = stream.index(calls[0])
        assert len(computes(stream[:first], "bwd")) >= 2 * (m - 1) * layers
        assert not computes(stream[first:], "fwd")
    # A bucket larger than the stage: one call with every gradient of the chunk.
    large = builder(m, pp=pp, zero=zero, bucket_params=10**12)
    (call,) = [o for o in large.stage_stream(1)
               if isinstance(o, Collective) and not o.blocking]
    assert call.size_bytes == pytest.approx(_params(range(layers, 2 * layers)) * GRAD_BYTES
                                            + HEAD_GRAD_BYTES)
    assert call.label == "grads of chunk 0"


def test_zero3_gathers_each_layer_ahead_and_reduce_scatters_its_gradients():
    m = 3
    build = builder(m, pp=1, dp=4, zero=3)
    stream = build.stage_stream(0)
    asynchronous = [o for o in stream if isinstance(o, Collective) and not o.blocking]
    gathers = [o for o in asynchronous if o.op == "all_gather"]
    reductions = [o for o in asynchronous if o.op == "reduce_scatter"]
    # Every layer, forward and backward, and FSDP's root unit (what no layer holds: the
    # embeddings and the final norm) once a micro-batch, kept through its backward.
    assert len(gathers) == 2 * m * MODEL.layers + m
    root = [o for o in gathers if o.label == "root gather params"]
    assert len(root) == m and root[0].size_bytes == pytest.approx(
        (ENTRY_GRAD_BYTES + FINAL_NORM_GRAD_BYTES) / GRAD_BYTES * 2)  # bf16 parameters
    # Every layer's gradients, the embeddings' and the final norm's, every micro-batch.
    assert len(reductions) == m * (MODEL.layers + 2)
    embedding = [o for o in reductions if o.label == "embedding reduce grads"]
    assert len(embedding) == m
    assert embedding[0].size_bytes == pytest.approx(ENTRY_GRAD_BYTES)
    head = [o for o in reductions if o.label == "output layer reduce grads"]
    assert len(head) == m and head[0].size_bytes == pytest.approx(FINAL_NORM_GRAD_BYTES)
    waits = [o for o in stream if isinstance(o, Wait) and o.handle is not None]
    assert Counter(w.handle for w in waits) == {
        "root": m, **{f"L{i}": 2 * m for i in range(MODEL.layers)}}
    # Each wait comes after its gather was launched, and the next layer's gather (the
    # prefetch) is launched before the layer's compute.
    launched: set[str] = set()
    for op in stream:
        if isinstance(op, Collective) and op.handle:
            launched.add(op.handle)
        elif isinstance(op, Wait) and op.handle:
            assert op.handle in launched
            launched.discard(op.handle)


def test_the_iteration_ends_with_gradients_embedding_norm_optimizer_and_gather():
    pp = 4
    build = builder(4, pp=pp, zero=1)
    for stage in range(pp):
        held = params_on_gpu(MODEL, tp=2, pp=pp, stage=stage)
        expected = [Wait(), Barrier("gradient norm"), Compute(OPTIMIZER_S, "optimizer step"),
                    Collective("all_gather", (held.dense + held.expert) * 2, "gather params",
                               group="dp")]
        if stage in (0, pp - 1):
            expected.insert(1, Collective("all_reduce", EMBEDDING_GRAD_BYTES,
                                          "tied embedding grads", group="embedding"))
        tail = build.stage_stream(stage)[-len(expected):]
        assert tail == expected
    # Without ZeRO nothing is gathered; without a pipeline no embedding is tied.
    assert builder(4, pp=1).stage_stream(0)[-3:-1] == [Wait(), Barrier("gradient norm")]


# --------------------------------------------------------------------------- order


@pytest.mark.parametrize(("pp", "m"), [(4, 8), (4, 4), (8, 8), (2, 1)])
def test_1f1b_warms_up_with_p_minus_stage_minus_1_forwards(pp, m):
    build = builder(m, pp=pp, schedule="1f1b")
    layers = MODEL.layers // pp
    for stage in range(pp):
        first = f"L{stage * layers} fwd attention"
        passes = []
        for op in flat(build.stage_stream(stage)):
            if isinstance(op, Compute) and op.layer == "transformer_layer":
                if op.label == first:
                    passes.append("F")
                elif op.label == f"L{(stage + 1) * layers - 1} bwd attention":
                    passes.append("B")
        warmup = min(pp - stage - 1, m)
        assert passes[:warmup] == ["F"] * warmup
        # Then one forward and one backward in turn, then the remaining backwards.
        steady = m - warmup
        assert passes[warmup:warmup + 2 * steady] == ["F", "B"] * steady
        assert passes[warmup + 2 * steady:] == ["B"] * warmup


def test_gpipe_runs_every_forward_before_any_backward():
    build = builder(8, pp=4, schedule="gpipe")
    stream = list(flat(build.stage_stream(1)))
    first_bwd = min(i for i, op in enumerate(stream)
                    if isinstance(op, Compute) and op.pass_name == "bwd")
    last_fwd = max(i for i, op in enumerate(stream)
                   if isinstance(op, Compute) and op.pass_name == "fwd")
    assert last_fwd < first_bwd


def test_a_receive_precedes_its_pass_and_a_send_follows_it():
    build = builder(4, pp=4, tp=1, dp=1, schedule="1f1b")
    stream = build.stage_stream(1)
    for i, op in enumerate(stream):
        if isinstance(op, Recv):
            following = stream[i + 1]
            assert isinstance(following, Compute)
            assert following.pass_name == ("fwd" if op.pass_name == "F" else "bwd")
        if isinstance(op, Send):
            before = stream[i - 1]
            assert isinstance(before, Compute)
            assert before.pass_name == ("fwd" if op.pass_name == "F" else "bwd")


# --------------------------------------------------------------------------- fusing


def test_fusing_merges_compute_and_exclusive_collectives_between_the_others():
    tp_s = 5e-5
    plain = builder(4, exclusive_tp=True, dp=1).stage_stream(2)
    fused = builder(4, exclusive_tp=True, dp=1,
                    tp_time_s=lambda op, size, stage: tp_s).stage_stream(2)
    assert list(flat(fused)) == plain
    for op in fused:
        assert not isinstance(op, Compute)
        assert not (isinstance(op, Collective) and op.exclusive)
        if isinstance(op, Fused):
            compute = [s.duration_s for s in op.steps if isinstance(s, Compute)]
            comm = [s for s in op.steps if isinstance(s, Collective)]
            assert op.compute_s == pytest.approx(sum(compute), rel=1e-12)
            assert op.comm_s == pytest.approx(tp_s * len(comm), rel=1e-12)
            assert op.durations_s == tuple(tp_s if isinstance(s, Collective)
                                           else s.duration_s for s in op.steps)
    # A forward pass between its receive and its send is one fused op.
    recv = next(i for i, op in enumerate(fused) if isinstance(op, Recv))
    assert isinstance(fused[recv + 1], Fused) and isinstance(fused[recv + 2], Send)


def test_fuse_leaves_non_local_ops_in_place():
    ops = [Compute(1.0, "a"), Compute(2.0, "b"), Wait("x"),
           Collective("all_reduce", 1.0, "c", exclusive=True), Barrier("n"),
           Collective("all_reduce", 1.0, "d")]
    out = fuse(ops, lambda op: 0.5)
    assert out == (Fused((ops[0], ops[1]), (1.0, 2.0), 3.0, 0.0), ops[2],
                   Fused((ops[3],), (0.5,), 0.0, 0.5), ops[4], ops[5])


def test_fuse_counts_the_hosts_steps_as_host_time():
    """A host step (the offloaded optimizer's wait) in a fused run is its ``host_s``, which
    a straggler's slowdown leaves alone; until 7 December fuse() left it 0 and the
    offload swap set it after fusing."""
    ops = [Compute(1.0, "a"), Collective("all_reduce", 1.0, "c", exclusive=True),
           Compute(2.0, "step", host=True)]
    (fused,) = fuse(ops, lambda op: 0.5)
    assert fused.host_s == 2.0 and fused.compute_s == 3.0
    assert fused.slowed_compute_s(2.0) == 2.0 * 1.0 + 2.0


def test_tp_is_exclusive_until_the_stage_launches_data_parallel_work():
    # One stage: the last micro-batch's backward launches the buckets, so its TP
    # collectives run as flows; every earlier one may be timed by its closed form.
    stream = builder(4, pp=1, exclusive_tp=True).stage_stream(0)
    last_fwd = max(i for i, op in enumerate(stream)
                   if isinstance(op, Compute) and op.pass_name == "fwd")
    tp = [(i, op) for i, op in enumerate(stream)
          if isinstance(op, Collective) and op.group == "tp"]
    assert all(op.exclusive == (i < last_fwd or "fwd" in op.label) for i, op in tp)
    assert any(not op.exclusive for _, op in tp)
    # Interleaved: after the first chunk launched its buckets, the other chunk's
    # remaining backwards are not exclusive either.
    stream = builder(4, pp=2, interleave=2, schedule="interleaved",
                     exclusive_tp=True).stage_stream(0)
    launch = min(i for i, op in enumerate(stream)
                 if isinstance(op, Collective) and not op.blocking)
    tp = [(i, op) for i, op in enumerate(stream)
          if isinstance(op, Collective) and op.group == "tp"]
    # Chunk 1's last backward launches; then micro-batch 2's and 3's chunk-0 backwards
    # run (2 layers, 2 blocks each), the first not the last micro-batch's.
    assert [op.exclusive for i, op in tp if i > launch] == [False] * (2 * 2 * 2)
    # Without data parallelism every TP collective of the stage is exclusive.
    alone = builder(4, pp=2, dp=1, exclusive_tp=True).stage_stream(0)
    assert all(op.exclusive for op in flat(alone)
               if isinstance(op, Collective) and op.group == "tp")


# --------------------------------------------------------------------------- the replay


def test_the_replay_says_what_each_measured_gpu_op_is():
    from distsim_gpu.measured.records import GpuEvent
    from distsim_gpu.workloads.traces.kineto_graph import _op_of

    gemm = GpuEvent("ampere_sgemm_128x64_tn", "compute", 1.0, 2e-4, stream=7)
    assert _op_of(gemm, 4) == Compute(2e-4, "ampere_sgemm_128x64_tn")
    copy = GpuEvent("Memcpy HtoD (Pageable -> Device)", "memcpy", 1.0, 3e-6)
    assert _op_of(copy, 4) == Memcpy(3e-6, copy.name)
    fill = GpuEvent("Memset (Device)", "memset", 1.0, 1e-6)
    assert _op_of(fill, 4) == Memcpy(1e-6, fill.name, memset=True)
    nccl = GpuEvent("ncclKernel_AllReduce_RING_LL_Sum_float", "communication", 1.0, 4e-5,
                    collective="all_reduce", message_bytes=1 << 20, group_ranks=(0, 2))
    assert _op_of(nccl, 4) == Collective("all_reduce", 1 << 20, nccl.name, group=(0, 2))
    # Without the process group's ranks: the whole job; without a size: None (the replay
    # keeps its measured transfer).
    bare = GpuEvent("ncclDevKernel_Generic", "communication", 1.0, 4e-5)
    assert _op_of(bare, 4) == Collective(None, None, bare.name, group=(0, 1, 2, 3))


def test_an_unknown_schedule_is_a_config_error_naming_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown schedule 'zb'") as info:
        stage_program("zb", pp=2, stage=0, microbatches=4)
    assert "gpipe, 1f1b, interleaved" in str(info.value)
