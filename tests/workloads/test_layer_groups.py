"""Per-layer strategies (``parallelism.layer_groups``, Galvatron): the groups' checks, the
resharding all-gather's bytes against ``b·(tp_wide/tp)·s·h·e``, narrower layers' compute
and collectives on blocks of the rank group, their gradients over k·dp ranks, memory
against a hand count, one group equal to today's run, and folding still exact."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from itertools import pairwise

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import (
    layer_params_local,
    memory_of_strategy,
    state_bytes,
)
from distsim_gpu.workloads.iteration.ops import Collective, Compute
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.layer_groups import (
    LayerGroup,
    block_subgroups,
    reshard_bytes,
    reshard_subgroups,
    shard_subgroups,
)
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    parallel_from_mapping,
)
from hypothesis import given
from hypothesis import strategies as st

from tests.workloads.layouts import check_layout, stream_builder

GPT = model_from_mapping({"name": "gpt", "layers": 4, "hidden": 1024, "heads": 16,
                          "seq_len": 256, "vocab": 32000})
E = 2  # bf16 activation bytes
# Beside the layers and the word embedding: the learned position embedding and the final
# norm, whole on every tensor rank.
OUTSIDE_WORD = GPT.seq_len * GPT.hidden + GPT.final_norm_params()


def groups(*spec: tuple) -> tuple[LayerGroup, ...]:
    return tuple(LayerGroup(*g) for g in spec)


_check = partial(check_layout, micro_batch=4, layers=4)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("data", "match", "key"), [
    ([{"layers": 3, "tp": 4}], "hold 3 layers but the model has 4", "layer_groups"),
    ([{"layers": 2, "tp": 4}, {"layers": 2, "tp": 3}], "do not split over tp = 3",
     "layer_groups[1].tp"),
    ([{"layers": 2, "tp": 4}, {"layers": 2, "tp": 8}], "does not divide parallelism.tp",
     "layer_groups[1].tp"),
    ([{"layers": 2, "tp": 4, "dp": 2}, {"layers": 2, "tp": 2, "dp": 2}],
     "tp·dp = 2·2 = 4 but a stage has tp·dp = 4·2 = 8", "layer_groups[1].dp"),
])
def test_bad_groups_are_named(data, match: str, key: str) -> None:
    parallel = parallel_from_mapping({"tp": 4, "dp": 2, "layer_groups": data})
    with pytest.raises(ConfigError, match=match) as err:
        _check(parallel)
    assert f"parallelism.{key}" in str(err.value) and "s.yaml" in str(err.value)


def test_micro_batch_must_split_over_the_sub_replicas() -> None:
    parallel = ParallelConfig(tp=4, layer_groups=groups((2, 4), (2, 1)))
    with pytest.raises(ConfigError, match="micro_batch 2 does not split over the 4"):
        _check(parallel, micro_batch=2)
    assert _check(parallel, micro_batch=4) == 1


@pytest.mark.parametrize(("value", "match"), [
    ([], "non-empty list"), ({"layers": 4}, "non-empty list"),
    ([{"layers": 4}], "missing 'tp'"), ([{"layers": 4, "tp": 4, "pp": 2}], "pp"),
    ([{"layers": 4, "tp": 4, "recompute": "some"}], "recompute mode"),
    ([{"layers": 0, "tp": 4}], "layers"),
])
def test_malformed_groups_are_clear_errors(value, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parallel_from_mapping({"tp": 4, "layer_groups": value})


@pytest.mark.parametrize("extra", [{"sequence_parallel": True}, {"zero": 1},
                                   {"tp_mode": "2d"}])
def test_strategies_not_modelled_with_groups_are_refused(extra) -> None:
    parallel = ParallelConfig(tp=4, dp=2, layer_groups=groups((4, 4)), **extra)
    with pytest.raises(ConfigError, match=r"layer_groups with .* is not modelled"):
        _check(parallel)


# ----------------------------------------------------------------------------- geometry


@given(st.sampled_from([(1, 1), (2, 1), (4, 1), (4, 2), (8, 2), (8, 4), (8, 8), (16, 4)]),
       st.data())
def test_subgroups_partition_the_rank_group(tps, data) -> None:
    tp, narrow = tps
    wide = data.draw(st.sampled_from([w for w in (1, 2, 4, 8, 16)
                                      if w % narrow == 0 and tp % w == 0]))
    for parts, size in ((block_subgroups(tp, narrow), narrow),
                        (shard_subgroups(tp, narrow), tp // narrow),
                        (reshard_subgroups(tp, narrow, wide), wide // narrow)):
        assert sorted(i for part in parts for i in part) == list(range(tp))
        assert all(len(part) == size for part in parts)
    # A resharding group holds one GPU of each narrow block inside one wide block.
    for part in reshard_subgroups(tp, narrow, wide):
        assert len({i // narrow for i in part}) == len(part)
        assert len({i // wide for i in part}) == 1


# ----------------------------------------------------------------------------- streams


_builder = partial(stream_builder, GPT, gpu="a100-80gb", micro_batch=8)


def _collectives(stream, word: str) -> list[Collective]:
    return [op for op in stream if isinstance(op, Collective) and word in op.label]


def _tp_all_reduces(stream, word: str) -> list[Collective]:
    return [op for op in _collectives(stream, word) if op.op == "all_reduce" and op.group == "tp"]


def test_reshard_is_an_all_gather_of_the_wide_groups_activation() -> None:
    """tp 4 -> 1 -> 4 on a rank group of 4: the forward gathers where tp grows (L2), the
    backward where it shrinks in the forward direction (L0 after L1's backward)."""
    parallel = ParallelConfig(tp=4, layer_groups=groups((1, 4), (2, 1), (1, 4)))
    builder, _ = _builder(parallel)
    stream = builder.stage_stream(0)
    reshards = _collectives(stream, "reshard")
    assert [op.label.split()[0] for op in reshards] == ["L3", "L0"]
    b, s, h = 8, 256, 1024
    for op in reshards:
        assert op.op == "all_gather" and op.size_bytes == b * s * h * E
        assert op.subgroups == ((0, 1, 2, 3),)
    assert reshard_bytes(micro_batch=8, seq_len=s, hidden=h, tp=8, wide=2,
                         element_bytes=E) == 8 * 2 / 8 * s * h * E


def test_narrow_layers_compute_their_share_and_talk_on_blocks() -> None:
    parallel = ParallelConfig(tp=4, layer_groups=groups((2, 4), (2, 2)))
    builder, costs = _builder(parallel)
    stream = builder.stage_stream(0)
    fwd = [op for op in stream if isinstance(op, Compute) and op.label.startswith("L3 fwd")]
    expected = costs.layer_time_s("fwd", GPT, LayerShard(micro_batch=4, seq_len=256, tp=2,
                                                         sequence_parallel=False, layer_index=3))
    assert sum(op.duration_s for op in fwd) == pytest.approx(expected)
    narrow = _tp_all_reduces(stream, "L3 ")
    assert len(narrow) == 4  # attention and MLP, forward and backward
    assert all(op.subgroups == ((0, 1), (2, 3)) and op.size_bytes == 4 * 256 * 1024 * E
               for op in narrow)
    wide = _tp_all_reduces(stream, "L0 ")
    assert all(op.subgroups is None and op.size_bytes == 8 * 256 * 1024 * E for op in wide)
    # tp 1: no tensor-parallel collective at all.
    solo, _ = _builder(ParallelConfig(tp=4, layer_groups=groups((2, 4), (2, 1))))
    assert not _tp_all_reduces(solo.stage_stream(0), "L3 ")


def test_narrow_gradients_all_reduce_over_k_dp_ranks() -> None:
    """A tp-2 layer's P/2 gradients: one all-reduce per layer over every replica's GPUs
    holding the same shard (dp_i = 2·dp), on the data-parallel stream; the buckets carry
    the tp-4 layers' gradients (and the embeddings' and final norm's) only."""
    parallel = ParallelConfig(tp=4, dp=2, layer_groups=groups((2, 4), (2, 2)))
    builder, _ = _builder(parallel)
    stream = builder.stage_stream(0)
    fp32 = 4
    narrow = _collectives(stream, "grads tp2")
    assert [op.label.split()[0] for op in narrow] == ["L3", "L2"]
    assert all(op.op == "all_reduce" and op.group == "dp" and not op.blocking
               and op.size_bytes == sum(layer_params_local(GPT, 3, 2, 1)) * fp32
               and op.subgroups == ((0, 2), (1, 3)) for op in narrow)
    buckets = [op for op in stream if isinstance(op, Collective) and op.group == "dp"
               and op.subgroups is None]
    wide = 2 * sum(layer_params_local(GPT, 0, 4, 1)) + GPT.vocab * GPT.hidden / 4
    wide += OUTSIDE_WORD
    assert sum(op.size_bytes for op in buckets) == pytest.approx(wide * fp32)


# ----------------------------------------------------------------------------- memory


def test_memory_against_a_hand_count() -> None:
    """Two narrow layers at tp 2 with full recompute beside two at tp 4 without: weights,
    gradients and optimizer state grow by the narrow layers' extra parameters, and their
    activations shrink to the 2·s·(b/2)·h input each, plus one layer's whole activations
    while it is recomputed."""
    from distsim_gpu.workloads.cost.memory import activation_bytes_per_layer
    base = ParallelConfig(tp=4)
    training = TrainingConfig(micro_batch=8, global_batch=8)
    mixed = replace(base, layer_groups=groups((2, 4), (2, 2, "full")))
    args = {"seq_len": 256, "microbatches": 1, "stage": 0, "flash_attention": False}
    uniform = memory_of_strategy(GPT, base, training, **args)
    grouped = memory_of_strategy(GPT, mixed, training, **args)
    extra = 2 * (sum(layer_params_local(GPT, 3, 2, 1)) - sum(layer_params_local(GPT, 3, 4, 1)))
    for field, per_param in zip(("weights_bytes", "gradients_bytes", "optimizer_bytes"),
                                state_bytes(training, base.grad_reduce_precision),
                                strict=True):
        assert getattr(grouped, field) == pytest.approx(getattr(uniform, field)
                                                        + per_param * extra, rel=1e-12)
    s, h = 256, 1024
    whole_narrow = activation_bytes_per_layer(GPT, LayerShard(micro_batch=4, seq_len=s, tp=2,
                                                              recompute="none"))
    whole_wide = activation_bytes_per_layer(GPT, LayerShard(micro_batch=8, seq_len=s, tp=4,
                                                            recompute="none"))
    expected = (uniform.activations_bytes - 2 * whole_wide + 2 * (E * s * 4 * h)
                + whole_narrow)
    assert grouped.activations_bytes == pytest.approx(expected, rel=1e-12)


# ----------------------------------------------------------------------------- iterations


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_one_group_is_todays_run(uniform, recompute: str) -> None:
    topology = build_cluster({"preset": "dgx-a100", "nodes": 2})
    parallel = ParallelConfig(tp=4, pp=2, dp=2, bucket_params=200_000)
    training = TrainingConfig(micro_batch=2, global_batch=8, recompute=recompute)
    one = replace(parallel, layer_groups=groups((8, 4)))
    runs = [uniform.run(topology, p, training, comm=CommParams()) for p in (parallel, one)]
    assert runs[1].iteration_time_s == pytest.approx(runs[0].iteration_time_s, rel=1e-9)
    for a, b in zip(runs[0].per_gpu, runs[1].per_gpu, strict=True):
        assert b.exposed_communication_s == pytest.approx(a.exposed_communication_s,
                                                          rel=1e-9, abs=1e-15)
        assert b.peak_memory_bytes == pytest.approx(a.peak_memory_bytes, rel=1e-9)


def test_mixed_groups_fold_exactly(uniform) -> None:
    topology = build_cluster({"preset": "dgx-a100", "nodes": 2})
    parallel = ParallelConfig(tp=4, dp=4, bucket_params=200_000,
                              layer_groups=groups((4, 4), (4, 2, "full")))
    training = TrainingConfig(micro_batch=2, global_batch=16)
    runs = [uniform.run(topology, parallel, training, comm=CommParams(), fold_replicas=f)
            for f in (True, False)]
    assert runs[0].folding.startswith("folded")
    assert runs[0].iteration_time_s == pytest.approx(runs[1].iteration_time_s, rel=1e-9)
    assert runs[0].iteration_time_s > 0



@given(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from(["none", "full"])),
                min_size=1, max_size=4))
def test_every_gradient_byte_is_reduced_once_and_every_widening_reshards(spec) -> None:
    """For any grouping of the 4 layers: the narrow all-reduces and the buckets carry each
    layer's P/tp_i gradients once (plus the embedding's), and there is one all-gather
    per place where tp grows going forward and one where it shrinks (backward)."""
    tps = [spec[i % len(spec)][0] for i in range(GPT.layers)]
    layer_groups = tuple(LayerGroup(1, tp, spec[i % len(spec)][1])
                         for i, tp in enumerate(tps))
    parallel = ParallelConfig(tp=4, dp=2, layer_groups=layer_groups)
    builder, _ = _builder(parallel)
    stream = builder.stage_stream(0)
    grads = [op for op in stream if isinstance(op, Collective) and op.group == "dp"]
    expected = sum(sum(layer_params_local(GPT, i, tp, 1)) for i, tp in enumerate(tps))
    expected += GPT.vocab * GPT.hidden / 4 + OUTSIDE_WORD
    assert sum(op.size_bytes for op in grads) == pytest.approx(expected * 4)
    changes = sum(a != b for a, b in pairwise(tps))
    assert len(_collectives(stream, "reshard")) == changes


def test_chakra_export_runs_back_the_groups(tmp_path) -> None:
    """Exported (narrow layers' calls per block, their gradients per shard over every
    replica), the graphs replay to the simulated time."""
    from distsim_gpu.measured.chakra import load_chakra
    from distsim_gpu.scenarios.scenario import scenario_from_mapping, spec_of
    from distsim_gpu.workloads.iteration.simulator import simulate_iteration
    from distsim_gpu.workloads.traces.chakra import export_chakra, run_chakra
    from distsim_gpu.workloads.traces.chakra_export import iteration_graphs
    spec = spec_of(scenario_from_mapping({
        "name": "groups", "cluster": {"preset": "dgx-a100", "nodes": 1},
        "model": {"name": "s", "layers": 2, "hidden": 512, "heads": 8, "seq_len": 128,
                  "vocab": 1024},
        "parallelism": {"tp": 4, "dp": 2,
                        "layer_groups": [{"layers": 1, "tp": 4}, {"layers": 1, "tp": 1}]},
        "training": {"micro_batch": 4, "global_batch": 8},
        "compute": {"gpu": "a100-80gb", "costs": "roofline"}}))
    simulated = simulate_iteration(spec).iteration_time_s
    graphs, _world = iteration_graphs(spec)
    export_chakra(graphs, tmp_path)
    run = run_chakra(load_chakra([tmp_path]), spec.topology, spec.comm)
    assert run.time_s == pytest.approx(simulated, rel=1e-9, abs=0)
