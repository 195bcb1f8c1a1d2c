"""2-D, 2.5-D and 3-D tensor parallelism (``parallelism.tp_mode``): the mesh's sub-groups,
each layer's collectives against the papers' formulas (SUMMA's q broadcasts of blocks;
Tesseract's depth; the cube's all-gathers and reduce-scatters), FLOPs and memory per GPU
split over tp, a simulated layer whose communication is the sum of its steps' closed
forms, and clear errors."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import memory_of_strategy
from distsim_gpu.workloads.cost.traffic import layer_params, stage_params
from distsim_gpu.workloads.iteration.ops import Collective, Compute
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    parallel_from_mapping,
)
from distsim_gpu.workloads.strategy.tp_nd import (
    Mesh,
    gemm_shapes,
    layer_comm,
    mesh_of,
    received_bytes,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.workloads.layouts import check_layout, stream_builder

GPT = model_from_mapping({"name": "gpt", "layers": 2, "hidden": 1024, "heads": 16,
                          "seq_len": 256, "vocab": 32000})
E = 2  # bytes per fp16 element


_check = partial(check_layout, micro_batch=16, layers=2)


# ----------------------------------------------------------------------------- the mesh


def test_2d_rows_are_consecutive_ranks_and_columns_strided() -> None:
    mesh = Mesh("2d", 2)
    assert mesh.groups("row") == ((0, 1), (2, 3))
    assert mesh.groups("col") == ((0, 2), (1, 3))
    assert mesh.groups("row", root=1) == ((1, 0), (3, 2))  # the root first


def test_3d_cube_axes() -> None:
    mesh = Mesh("3d", 2)
    assert mesh.groups("x") == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert mesh.groups("y") == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert mesh.groups("z") == ((0, 4), (1, 5), (2, 6), (3, 7))


@given(mode=st.sampled_from(["2d", "2.5d", "3d"]), q=st.integers(2, 4),
       depth=st.integers(1, 3))
@settings(max_examples=30, deadline=None)
def test_every_axis_partitions_the_group(mode: str, q: int, depth: int) -> None:
    """Along each axis the sub-groups are disjoint, of the axis's size, and cover 0..tp-1
    whatever the root."""
    mesh = Mesh(mode, q, depth if mode == "2.5d" else 1)
    axes = {"2d": ("row", "col"), "2.5d": ("row", "col", "depth"), "3d": ("x", "y", "z")}
    for axis, size in zip(axes[mode], mesh.shape, strict=True):
        for root in range(size):
            groups = mesh.groups(axis, root)
            assert sorted(r for g in groups for r in g) == list(range(mesh.tp))
            assert {len(g) for g in groups} == {size}
            assert len(groups) == mesh.tp // size


@pytest.mark.parametrize(("mode", "tp", "depth", "q"), [
    ("2d", 4, 1, 2), ("2d", 64, 1, 8), ("2.5d", 8, 2, 2), ("2.5d", 36, 4, 3),
    ("3d", 8, 1, 2), ("3d", 64, 1, 4)])
def test_mesh_sides(mode: str, tp: int, depth: int, q: int) -> None:
    mesh = mesh_of(mode, tp, depth)
    assert mesh is not None and mesh.q == q and mesh.tp == tp


@pytest.mark.parametrize(("mode", "tp", "depth", "match"), [
    ("2d", 8, 1, "tp = 8 is not q²"),
    ("2d", 1, 1, "tp = 1 is not q²"),
    ("3d", 16, 1, "tp = 16 is not q³"),
    ("2.5d", 12, 2, "tp = 12 is not d·q² with d = tp_depth = 2"),
    ("2.5d", 9, 2, "tp = 9 is not d·q²"),
    ("2d", 4, 2, "tp_depth 2 needs tp_mode: 2.5d"),
    ("4d", 16, 1, "parallelism.tp_mode"),
])
def test_mesh_errors(mode: str, tp: int, depth: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        mesh_of(mode, tp, depth)


def test_1d_is_the_default_and_has_no_mesh() -> None:
    assert ParallelConfig().tp_mode == "1d" and mesh_of("1d", 8) is None
    parsed = parallel_from_mapping({"tp": 8, "tp_mode": "3D"})
    assert parsed.tp_mode == "3d"


# ----------------------------------------------------------------------------- the plans


def _gemms(model=GPT):
    return [kn for shapes in gemm_shapes(model).values() for kn in shapes]


@pytest.mark.parametrize("q", [2, 4])
def test_2d_summa_broadcasts_q_blocks_per_gemm(q: int) -> None:
    """Forward: per GEMM, q row broadcasts of an M/q × K/q block of A and q column
    broadcasts of a K/q × N/q block of B, step l rooted at position l; backward: the B and
    A broadcasts again with a reduce of each product block (twice the forward)."""
    tokens = 16 * 256
    plans = layer_comm(Mesh("2d", q), GPT, tokens=tokens, element_bytes=E)
    fwd = plans[("fwd", "attention")] + plans[("fwd", "mlp")]
    bwd = plans[("bwd", "attention")] + plans[("bwd", "mlp")]
    assert len(fwd) == 4 * 2 * q and len(bwd) == 4 * 4 * q
    assert {s.op for s in fwd} == {"broadcast"}
    assert [s.root for s in plans[("fwd", "attention")][:2 * q:2]] == list(range(q))
    a_bytes = sum(E * tokens * k / q for k, _n in _gemms())  # q blocks of M·K/q²
    b_bytes = sum(E * k * n / q for k, n in _gemms())
    assert sum(s.size_bytes for s in fwd if s.axis == "row") == pytest.approx(a_bytes)
    assert sum(s.size_bytes for s in fwd if s.axis == "col") == pytest.approx(b_bytes)
    assert sum(s.size_bytes for s in bwd if s.op == "reduce") == pytest.approx(
        a_bytes + b_bytes)
    assert sum(s.size_bytes for s in bwd) == pytest.approx(2 * (a_bytes + b_bytes))


def test_25d_shrinks_the_a_blocks_by_depth_and_reduces_weights_over_it() -> None:
    tokens, q, d = 16 * 256, 2, 4
    flat = layer_comm(Mesh("2d", q), GPT, tokens=tokens, element_bytes=E)
    deep = layer_comm(Mesh("2.5d", q, d), GPT, tokens=tokens, element_bytes=E)
    for key in flat:
        a_flat = sum(s.size_bytes for s in flat[key] if s.axis == "row")
        a_deep = sum(s.size_bytes for s in deep[key] if s.axis == "row")
        assert a_deep == pytest.approx(a_flat / d)
        b_flat = sum(s.size_bytes for s in flat[key] if s.axis == "col")
        assert sum(s.size_bytes for s in deep[key] if s.axis == "col") == pytest.approx(b_flat)
    depth = [s for key in deep for s in deep[key] if s.axis == "depth"]
    assert [s.op for s in depth] == ["all_reduce"] * 4  # one per GEMM, backward only
    assert sum(s.size_bytes for s in depth) == pytest.approx(
        sum(E * k * n / q**2 for k, n in _gemms()))


@pytest.mark.parametrize("q", [2, 4])
def test_3d_cube_gathers_input_and_weight_and_scatters_output(q: int) -> None:
    """Per GEMM: all-gather of the M/q² × K/q input blocks over one axis (buffer M·K/q²),
    of the K/q × N/q² weight blocks over another (K·N/q²), reduce-scatter of the
    M/q × N/q product over the third (M·N/q²); backward all-gathers dC and
    reduce-scatters dA and dB.  Consecutive GEMMs swap input and output axes."""
    tokens = 16 * 256
    plans = layer_comm(Mesh("3d", q), GPT, tokens=tokens, element_bytes=E)
    qkv = plans[("fwd", "attention")]
    (k, n), (k2, n2) = gemm_shapes(GPT)["attention"]
    assert [(s.op, s.axis, s.size_bytes) for s in qkv] == [
        ("all_gather", "x", E * tokens * k / q**2), ("all_gather", "y", E * k * n / q**2),
        ("reduce_scatter", "z", E * tokens * n / q**2),
        ("all_gather", "z", E * tokens * k2 / q**2), ("all_gather", "y", E * k2 * n2 / q**2),
        ("reduce_scatter", "x", E * tokens * n2 / q**2)]
    bwd = plans[("bwd", "attention")]  # the output projection's first
    assert [(s.op, s.axis) for s in bwd[:3]] == [
        ("all_gather", "x"), ("reduce_scatter", "z"), ("reduce_scatter", "y")]
    per_gpu = sum(received_bytes(s, q) for key in plans for s in plans[key])
    closed = 2 * (q - 1) / q * sum(E * (tokens * k + k * n + tokens * n) / q**2
                                   for k, n in _gemms())
    assert per_gpu == pytest.approx(closed)


def test_3d_moves_o_of_1_over_q2_of_the_volume() -> None:
    """The cube's bytes per GPU fall as 1/q² (q = 2 -> 4: a quarter, times (q-1)/q)."""
    tokens = 64 * 256
    vols = [sum(received_bytes(s, q) for steps in layer_comm(
        Mesh("3d", q), GPT, tokens=tokens, element_bytes=E).values() for s in steps)
        for q in (2, 4)]
    assert vols[1] / vols[0] == pytest.approx((3 / 4) / (1 / 2) / 4)


# ----------------------------------------------------------------------------- streams


_builder = partial(stream_builder, GPT, gpu="v100-32gb", micro_batch=16, precision="fp16")


@pytest.mark.parametrize(("mode", "tp"), [("2d", 4), ("2.5d", 8), ("3d", 8)])
def test_stream_runs_the_plan_on_sub_groups_and_splits_all_compute(mode: str, tp: int) -> None:
    parallel = ParallelConfig(tp=tp, tp_mode=mode, tp_depth=2 if mode == "2.5d" else 1)
    builder, costs = _builder(parallel)
    stream = builder.stage_stream(0)
    mesh_ops = [op for op in stream if isinstance(op, Collective) and op.group == "tp"]
    plans = layer_comm(mesh_of(mode, tp, parallel.tp_depth), GPT, tokens=16 * 256,
                       element_bytes=E)
    assert len(mesh_ops) == GPT.layers * sum(len(steps) for steps in plans.values())
    assert all(op.subgroups and not op.exclusive for op in mesh_ops)
    # FLOPs per GPU: 1/tp of everything, element-wise work included.
    layer = [op for op in stream if isinstance(op, Compute) and op.label.startswith("L0 fwd")]
    expected = costs.layer_time_s("fwd", GPT, LayerShard(micro_batch=16, seq_len=256, tp=tp,
                                                         sequence_parallel=True, layer_index=0))
    assert sum(op.duration_s for op in layer) == pytest.approx(expected)


def test_full_recompute_repeats_the_forward_plan() -> None:
    parallel = ParallelConfig(tp=4, tp_mode="2d")
    plain = _builder(parallel)[0].stage_stream(0)
    again = _builder(parallel, recompute="full")[0].stage_stream(0)
    count = lambda s: sum(isinstance(op, Collective) and op.group == "tp" for op in s)  # noqa: E731
    fwd = sum(len(v) for k, v in layer_comm(Mesh("2d", 2), GPT, tokens=16 * 256,
                                            element_bytes=E).items() if k[0] == "fwd")
    assert count(again) - count(plain) == GPT.layers * fwd


def test_simulated_layer_is_the_sum_of_its_steps(uniform) -> None:
    """On a non-blocking switch the sub-groups of a step share no link: the exposed
    communication is the sum over steps of one sub-group's closed-form time."""
    from distsim_gpu.collectives import CommParams, Communicator
    from distsim_gpu.simcore.simulation import Simulation
    model = model_from_mapping({"name": "one", "layers": 1, "hidden": 256, "heads": 4,
                                "seq_len": 64, "vocab": 1024})
    topology = build_cluster({"preset": "switch", "gpus": 4, "link_bandwidth": 2e9,
                              "link_latency": 0})
    parallel = ParallelConfig(tp=4, tp_mode="2d")
    training = TrainingConfig(micro_batch=2, global_batch=2, precision="fp16")
    comm = CommParams(protocol="simple").ideal()
    result = uniform.run(topology, parallel, training, model=model, comm=comm)
    ring = Communicator(Simulation(0), topology, comm)
    gpus = [f"n0.gpu{i}" for i in range(4)]
    mesh = Mesh("2d", 2)
    expected = 0.0
    for steps in layer_comm(mesh, model, tokens=128, element_bytes=E).values():
        for step in steps:
            group = [gpus[i] for i in mesh.groups(step.axis, step.root)[0]]
            expected += ring.estimate_s(step.op, group, step.size_bytes)
    assert expected > 0
    assert result.per_gpu[0].exposed_communication_s == pytest.approx(expected, rel=1e-6)


# ----------------------------------------------------------------------------- memory


@pytest.mark.parametrize(("mode", "tp", "depth"), [("2d", 16, 1), ("3d", 8, 1),
                                                   ("3d", 64, 1), ("2.5d", 8, 2)])
def test_memory_is_the_unsplit_memory_over_the_mesh(mode: str, tp: int, depth: int) -> None:
    """Optimus / Tesseract / Bian et al.: parameters, gradients, optimizer state and
    activations all split over the tp GPUs (2.5-D: weights over q², held by each depth
    layer)."""
    training = TrainingConfig(micro_batch=16, global_batch=16)
    kw = {"seq_len": 256, "microbatches": 1, "stage": 0, "flash_attention": False}
    whole = memory_of_strategy(GPT, ParallelConfig(), training, **kw)
    nd = memory_of_strategy(GPT, ParallelConfig(tp=tp, tp_mode=mode, tp_depth=depth),
                            training, **kw)
    assert nd.weights_bytes == pytest.approx(whole.weights_bytes * depth / tp)
    assert nd.optimizer_bytes == pytest.approx(whole.optimizer_bytes * depth / tp)
    assert nd.activations_bytes == pytest.approx(whole.activations_bytes / tp)
    par = ParallelConfig(tp=tp, tp_mode=mode, tp_depth=depth)
    assert layer_params(GPT, 0, par) == pytest.approx(
        layer_params(GPT, 0, ParallelConfig()) * depth / tp)
    assert stage_params(GPT, par, 0) == pytest.approx(
        stage_params(GPT, ParallelConfig(), 0) * depth / tp)


def test_1d_memory_is_unchanged() -> None:
    training = TrainingConfig(micro_batch=4, global_batch=4)
    kw = {"seq_len": 256, "microbatches": 1, "stage": 0, "flash_attention": False}
    one = memory_of_strategy(GPT, ParallelConfig(tp=4), training, **kw)
    assert one == memory_of_strategy(GPT, replace(ParallelConfig(tp=4), tp_mode="1d"),
                                     training, **kw)
    assert one.activations_bytes > memory_of_strategy(
        GPT, ParallelConfig(tp=4, tp_mode="2d"), training, **kw).activations_bytes


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("parallel", "match"), [
    (ParallelConfig(tp=8, tp_mode="3d", sequence_parallel=True),
     "parallelism.sequence_parallel: tp_mode 3d"),
    (ParallelConfig(tp=8, tp_mode="3d", cp=2), "parallelism.cp: tp_mode 3d"),
    (ParallelConfig(tp=4, tp_mode="2d", dp=2, zero=3), "parallelism.zero: tp_mode 2d"),
    (ParallelConfig(tp=16, tp_mode="3d"), "parallelism.tp: tp = 16 is not q³"),
    (ParallelConfig(tp=8, tp_mode="2d"), "parallelism.tp: tp = 8 is not q²"),
])
def test_unsupported_combinations_are_named(parallel: ParallelConfig, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _check(parallel)


def test_moe_and_ep_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"parallelism\.ep: tp_mode 2d"):
        _check(ParallelConfig(tp=4, tp_mode="2d", dp=2, ep=2), experts=4)


def test_micro_batch_must_split_over_the_token_rows() -> None:
    with pytest.raises(ConfigError, match=r"training\.micro_batch: micro_batch 8 does "
                                          r"not split 16 ways"):
        _check(ParallelConfig(tp=64, tp_mode="3d"), micro_batch=8, heads=64, kv_heads=64)
    assert _check(ParallelConfig(tp=64, tp_mode="3d"), heads=64, kv_heads=64) == 1


def test_heads_split_over_one_side_only() -> None:
    """2-D on 64 GPUs needs heads divisible by q = 8, not by 64."""
    assert _check(ParallelConfig(tp=64, tp_mode="2d"), heads=16, kv_heads=16) == 1
    with pytest.raises(ConfigError, match="12 attention heads do not split over q = 8"):
        _check(ParallelConfig(tp=64, tp_mode="2d"), heads=12, kv_heads=12)


def test_chakra_export_runs_back_the_mesh_steps(tmp_path) -> None:
    """Exported with one call per sub-group, the graphs replay to the simulated time."""
    from distsim_gpu.measured.chakra import load_chakra
    from distsim_gpu.scenarios.scenario import scenario_from_mapping, spec_of
    from distsim_gpu.workloads.iteration.simulator import simulate_iteration
    from distsim_gpu.workloads.traces.chakra import export_chakra, run_chakra
    from distsim_gpu.workloads.traces.chakra_export import iteration_graphs
    spec = spec_of(scenario_from_mapping({
        "name": "small-3d", "cluster": {"preset": "dgx-a100", "nodes": 1},
        "model": {"name": "s", "layers": 1, "hidden": 512, "heads": 8, "seq_len": 128,
                  "vocab": 1024},
        "parallelism": {"tp": 8, "tp_mode": "3d"},
        "training": {"micro_batch": 4, "global_batch": 4},
        "compute": {"gpu": "a100-80gb", "costs": "roofline"}}))
    simulated = simulate_iteration(spec).iteration_time_s
    graphs, _world = iteration_graphs(spec)
    export_chakra(graphs, tmp_path)
    run = run_chakra(load_chakra([tmp_path]), spec.topology, spec.comm)
    assert run.time_s == pytest.approx(simulated, rel=1e-9, abs=0)


def test_folded_replicas_equal_the_full_simulation(uniform) -> None:
    """Data-parallel replicas of a 2-D mesh fold: their sub-group calls run beside the
    simulated one's, and the iteration is the full simulation's."""
    from distsim_gpu.collectives import CommParams
    model = model_from_mapping({"name": "s", "layers": 2, "hidden": 512, "heads": 8,
                                "seq_len": 128, "vocab": 1024})
    topology = build_cluster({"preset": "dgx-a100", "nodes": 2})
    parallel = ParallelConfig(tp=4, dp=4, tp_mode="2d", bucket_params=100_000)
    training = TrainingConfig(micro_batch=2, global_batch=8)
    runs = [uniform.run(topology, parallel, training, model=model, comm=CommParams(),
                        fold_replicas=fold) for fold in (True, False)]
    assert runs[0].folding.startswith("folded")
    assert runs[0].iteration_time_s == pytest.approx(runs[1].iteration_time_s, rel=1e-9)
