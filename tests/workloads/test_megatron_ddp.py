"""Megatron-Core's DistributedDataParallel as it buckets and gathers (docs/overlaps.md):

* ``parallelism.bucketing: first_chunk`` — only the first pipeline stage's first model
  chunk is cut into buckets; every other chunk reduces its gradients in one bucket after
  its last backward and gathers its parameters in one (``distributed_data_parallel.py``:
  bucketing off for ``pp_rank > 0`` and, by ``disable_bucketing``, for later chunks);
* the overlapped parameter gather dispatched by the forward, one bucket ahead, without
  ``align_param_gather``; by the interleaved schedule, a chunk at a time, with it
  (:mod:`workloads.iteration.ddp_dispatch`);
* gradient reductions dispatched by the interleaved schedule under ``align_grad_reduce``,
  a chunk at a time after its last backward, at the same moment on every stage;
* the stacks' bucket sizes: Megatron-Core's ``max(40M, 1M·dp)``, NeMo's 128 Mi, and no
  data-parallel overlap from NeMo's callback where ``dp`` is 1.
"""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.scenarios.scenario import scenario_from_mapping
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.compute.roofline import RooflineCosts
from distsim_gpu.workloads.cost.compute.stacks import ONE_BUCKET
from distsim_gpu.workloads.cost.traffic import stage_param_bytes
from distsim_gpu.workloads.iteration.ddp_dispatch import aligned_launches, reduce_points
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Wait
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

RING = CommParams(protocol="simple", algorithm="ring")
#: Eight 1024-wide layers and a small vocabulary (the output layer is not a bucket's bulk).
MODEL = model_from_mapping({"name": "m", "layers": 8, "hidden": 1024, "heads": 16,
                            "seq_len": 512, "vocab": 1024})
LAYER = MODEL.layer_params(0)


def _stream(stage: int, **parallel) -> list:
    par = ParallelConfig(**{"dp": 2, "zero": 1, "bucket_params": LAYER, **parallel})
    train = TrainingConfig(micro_batch=1, global_batch=8)
    build = StreamBuilder(MODEL, par, train, RooflineCosts(get_gpu("a100-80gb")),
                          microbatches=4)
    return list(build.stage_stream(stage))


def _collectives(stream: list, op: str) -> list[Collective]:
    return [o for o in stream if isinstance(o, Collective) and o.op == op]


# --------------------------------------------------------------------------- bucketing


def test_first_chunk_bucketing_reduces_later_stages_in_one_bucket_after_the_backward():
    for bucketing, stage1_buckets in (("every_chunk", 4), ("first_chunk", 1)):
        first = _collectives(_stream(0, pp=2, bucketing=bucketing), "reduce_scatter")
        later = _stream(1, pp=2, bucketing=bucketing)
        reduces = _collectives(later, "reduce_scatter")
        assert len(first) == 4 + 1  # a bucket per layer, and the embedding's
        assert len(reduces) == stage1_buckets
    # The one bucket goes after the stage's last backward compute, holding all of it.
    last_bwd = max(i for i, o in enumerate(later) if isinstance(o, Compute)
                   and o.label.endswith("bwd mlp"))
    assert later.index(reduces[0]) > last_bwd
    every = _collectives(_stream(1, pp=2), "reduce_scatter")
    assert reduces[0].size_bytes == pytest.approx(sum(c.size_bytes for c in every), rel=1e-12)


def test_first_chunk_bucketing_leaves_later_interleaved_chunks_one_bucket_each():
    stream = _stream(0, pp=2, schedule="interleaved", interleave=2, bucketing="first_chunk")
    labels = [c.label for c in _collectives(stream, "reduce_scatter")]
    # Chunk 0 (layers 0-1): a bucket per layer and the embedding's; chunk 1: one.
    assert sum(label.startswith("grads to L") for label in labels) == 2
    assert labels.count("grads of chunk 1") == 1


# --------------------------------------------------------------------------- dispatch


def test_without_alignment_each_wait_dispatches_the_next_bucket():
    """Nothing is gathered before the forward: the first bucket is dispatched where it is
    needed and waited for at once, and each wait dispatches the next bucket."""
    stream = _stream(0, pp=2, overlap_param_gather=True)
    assert type(_stream(1, pp=2, overlap_param_gather=True)[0]).__name__ == "Recv"
    sequence = [(type(o).__name__, o.handle) for o in stream
                if (isinstance(o, Wait) and o.handle)
                or (isinstance(o, Collective) and o.op == "all_gather")]
    handles = [h for kind, h in sequence if kind == "Collective"]
    expected = [("Collective", handles[0])]
    for n, handle in enumerate(handles):
        expected.append(("Wait", handle))
        if n + 1 < len(handles):
            expected.append(("Collective", handles[n + 1]))
    assert sequence == expected
    assert len(handles) == 1 + 4  # the embedding's bucket and a bucket per layer
    gathered = sum(c.size_bytes for c in _collectives(stream, "all_gather"))
    assert gathered == pytest.approx(stage_param_bytes(
        MODEL, ParallelConfig(pp=2, dp=2, zero=1), TrainingConfig(global_batch=8), 0))


@pytest.mark.parametrize("stage", [0, 1])
def test_aligned_gathers_go_out_a_chunk_at_a_time_where_the_schedule_says(stage):
    """Interleaved, 4 chunks of one layer on pp 2: chunks 0 and 1 at the schedule's start,
    chunk ``c`` after ``(c − 1)·pp − stage`` forwards, every bucket of a chunk at once,
    and each chunk's first forward only waits."""
    stream = _stream(stage, pp=2, schedule="interleaved", interleave=4,
                     overlap_param_gather=True)
    forwards = 0  # one layer a chunk: a forward is its layer's attention block
    launched_after: dict[int, list[int]] = {}
    for op in stream:
        if isinstance(op, Compute) and op.label.endswith(" fwd attention"):
            forwards += 1
        elif isinstance(op, Collective) and op.op == "all_gather":
            chunk = int(op.handle.split()[-1].split(".")[0])
            launched_after.setdefault(chunk, []).append(forwards)
    assert {chunk: set(at) for chunk, at in launched_after.items()} == {
        0: {0}, 1: {0}, 2: {2 - stage}, 3: {4 - stage}}
    assert aligned_launches(stage, 2, [0, 1, 2, 3]) == {2 - stage: 2, 4 - stage: 3}
    waits = [o.handle for o in stream if isinstance(o, Wait) and o.handle]
    gathers = [c.handle for c in _collectives(stream, "all_gather")]
    assert sorted(waits) == sorted(gathers)  # each waited for once


#: Megatron's interleaved backward table for m 4, pp 2, 2 chunks: groups of pp micro-batches
#: a chunk, the chunks in reverse — (micro-batch, chunk) per backward.
TABLE = [(0, 1), (1, 1), (0, 0), (1, 0), (2, 1), (3, 1), (2, 0), (3, 0)]


def test_aligned_reductions_go_out_where_the_schedule_says():
    # Chunk 1's last micro-batch is backward 5, chunk 0's backward 7: stage s dispatches
    # each s backwards later, or after its last backward.
    assert reduce_points(0, TABLE, 3) == {5: 1, 7: 0}
    assert reduce_points(1, TABLE, 3) == {6: 1}
    for stage, expected in ((0, {1: 6, 0: 8}), (1, {1: 7, 0: 8})):
        stream = _stream(stage, pp=2, schedule="interleaved", interleave=2,
                         align_grad_reduce=True)
        backwards, after = 0, {}
        for op in stream:
            if (isinstance(op, Compute) and op.label.endswith(" bwd mlp")
                    and op.layer_index % 2 == 0):
                backwards += 1  # two layers a chunk: the even one ends a backward
            elif isinstance(op, Collective) and op.op == "reduce_scatter":
                # "grads to L<n>": layer n of virtual stage n // 2, chunk (n // 2) // pp.
                label = op.label.split()[-1]
                chunk = int(label) if label.isdigit() else int(label[1:]) // 2 // 2
                after.setdefault(chunk, set()).add(backwards)
        assert {chunk: min(at) for chunk, at in after.items()} == expected
        assert all(len(at) == 1 for at in after.values())  # a chunk's buckets at once


def test_aligned_reductions_expose_the_first_chunks_last_backward_buckets(uniform):
    """Interleaved, pp 2, 2 chunks of 2 layers, a bucket per layer: stage 0's chunk 0
    ends the step.  Dispatched during its last backward, its layer-1 bucket hides under
    layer 0's backward and the critical path ends on layer 0's; dispatched after it
    (aligned), layer 1's reduction is on the critical path too, whole."""
    # Short sequences: the pipeline's sends, which share the GPUs' links with the
    # reductions and so move a little with them, take microseconds (the bound below).
    model = model_from_mapping({**MODEL.to_dict(), "seq_len": 64})
    iterations = type(uniform)(model, uniform.gpu, t_fwd_s=2e-3, t_bwd_s=4e-3)
    topo = build_cluster({"preset": "switch", "gpus": 4, "link_bandwidth": "50 GB/s",
                          "link_latency": "1 us"})
    training = TrainingConfig(micro_batch=1, global_batch=8)
    runs = {}
    for aligned in (False, True):
        parallel = ParallelConfig(pp=2, dp=2, zero=1, bucket_params=LAYER,
                                  schedule="interleaved", interleave=2,
                                  align_grad_reduce=aligned)
        runs[aligned] = iterations.run(topo, parallel, training, comm=RING)
    dp_group = build_cluster({"preset": "switch", "gpus": 2, "link_bandwidth": "50 GB/s",
                              "link_latency": "1 us"})
    reduce_s = Communicator(Simulation(), dp_group, RING).estimate_s(
        "reduce_scatter", list(dp_group.gpus), 4 * LAYER)  # a layer's fp32 gradients
    assert reduce_s < 4e-3 / 2  # short enough to hide under a layer's backward
    tails = {}
    for aligned, run in runs.items():
        path = run.critical_path
        last = max(i for i, e in enumerate(path) if e.kind == "compute")
        tails[aligned] = [e.label for e in path[last + 1:last + 3]]
    assert tails[False][0] == "grads to L0"
    assert tails[True] == ["grads to L1", "grads to L0"]
    exposed = next(e for e in runs[True].critical_path if e.label == "grads to L1")
    assert exposed.duration_s == pytest.approx(reduce_s, rel=1e-9)
    send_s = max(e.duration_s for e in runs[True].critical_path if e.kind == "pp transfer")
    assert runs[True].iteration_time_s - runs[False].iteration_time_s == pytest.approx(
        reduce_s, abs=send_s)


def test_align_grad_reduce_needs_the_interleaved_schedule(tiny):
    with pytest.raises(ConfigError, match=r"parallelism\.align_grad_reduce"):
        scenario_from_mapping(tiny(parallelism={"align_grad_reduce": True}))


# --------------------------------------------------------------------------- closed form


def _gather_s(topo, size_bytes: float) -> float:
    return Communicator(Simulation(), topo, RING).estimate_s("all_gather", list(topo.gpus),
                                                             size_bytes)


def test_a_later_stage_waits_for_its_whole_gather_before_its_first_forward(uniform):
    """pp 2, 1F1B: stage 1's single bucket is dispatched by its first forward and waited
    for at once, where a bucket per layer exposes only the first layer's; the pipeline
    waits for stage 1, so the step grows by the difference (every later bucket's gather
    is shorter than a layer, hidden)."""
    iterations = type(uniform)(MODEL, uniform.gpu, t_fwd_s=2e-3, t_bwd_s=4e-3)
    topo = build_cluster({"preset": "switch", "gpus": 4, "link_bandwidth": "50 GB/s",
                          "link_latency": "1 us"})
    training = TrainingConfig(micro_batch=1, global_batch=4)
    times = {}
    for bucketing in ("every_chunk", "first_chunk"):
        parallel = ParallelConfig(pp=2, dp=2, zero=1, bucket_params=LAYER,
                                  overlap_param_gather=True, bucketing=bucketing)
        times[bucketing] = iterations.run(topo, parallel, training, comm=RING).iteration_time_s
    dp_group = build_cluster({"preset": "switch", "gpus": 2, "link_bandwidth": "50 GB/s",
                              "link_latency": "1 us"})
    stage1 = stage_param_bytes(MODEL, parallel, training, 1)
    layer_bytes = 2 * LAYER  # bf16
    assert _gather_s(dp_group, stage1 - 3 * layer_bytes) < 2e-3  # the last bucket hides
    expected = _gather_s(dp_group, stage1) - _gather_s(dp_group, layer_bytes)
    assert times["first_chunk"] - times["every_chunk"] == pytest.approx(expected, rel=1e-6)


# --------------------------------------------------------------------------- defaults


def _resolved(tiny, **sections) -> dict:
    return scenario_from_mapping(tiny(**sections)).resolved()["parallelism"]


def test_the_stacks_bucket_as_their_frameworks_do(tiny):
    nemo = _resolved(tiny, parallelism={"zero": 1}, compute={"stack": "nemo"})
    assert (nemo["bucket_params"], nemo["bucketing"]) == (128 * 2**20, "first_chunk")
    core = _resolved(tiny, parallelism={"zero": 1})  # megatron-core, dp 2
    assert (core["bucket_params"], core["bucketing"]) == (40_000_000, "first_chunk")
    torch = _resolved(tiny, parallelism={"zero": 1}, compute={"stack": "torch-compile"})
    assert torch["bucket_params"] == 40_000_000 and "bucketing" not in torch
    # Megatron-Core's DDP reduces as the interleaved schedule says; PyTorch's as it fills.
    interleaved = {"pp": 2, "schedule": "interleaved", "interleave": 2, "zero": 1}
    assert _resolved(tiny, parallelism=interleaved)["align_grad_reduce"] is True
    assert "align_grad_reduce" not in _resolved(tiny, parallelism=interleaved,
                                                compute={"stack": "torch-compile"})
    said = _resolved(tiny, parallelism={"bucket_params": "25M", "bucketing": "every_chunk"},
                     compute={"stack": "nemo"})
    assert said["bucket_params"] == 25_000_000 and "bucketing" not in said


def test_megatron_core_buckets_grow_with_the_data_parallel_degree():
    from distsim_gpu.workloads.cost.compute.stacks import get_stack
    core = get_stack("megatron-core")
    assert core.ddp_bucket_params(8) == 40_000_000
    assert core.ddp_bucket_params(64) == 64_000_000  # max(40M, 1M·dp)
    assert get_stack("megatron-deepspeed").ddp_bucket_params(64) == ONE_BUCKET


def test_nemo_leaves_the_data_parallel_overlaps_off_without_data_parallelism(tiny):
    alone = _resolved(tiny, parallelism={"tp": 4, "dp": 1, "zero": 1},
                      compute={"stack": "nemo"})
    assert alone["bucket_params"] == ONE_BUCKET
    assert "overlap_param_gather" not in alone


def test_a_run_says_when_nemo_leaves_the_overlaps_off_at_dp_1(tiny):
    from distsim_gpu.scenarios.scenario import run_scenario

    def notes(**parallelism) -> list[str]:
        run = run_scenario(scenario_from_mapping(tiny(
            parallelism={"tp": 2, "pp": 2, "zero": 1, **parallelism},
            compute={"stack": "nemo"})))
        return [str(n) for n in run.notes if "only where dp > 1" in str(n)]
    assert len(notes(cp=2, dp=1)) == 1  # the CP ranks reduce, without overlap
    assert notes(cp=1, dp=2) == []  # the overlaps are on
    assert notes(cp=2, dp=1, bucket_params="40M") == []  # the scenario said


def test_align_param_gather_needs_the_interleaved_schedule_and_the_overlap(tiny):
    with pytest.raises(ConfigError, match=r"parallelism\.align_param_gather"):
        scenario_from_mapping(tiny(parallelism={"zero": 1, "overlap_param_gather": True,
                                                "align_param_gather": True}))
    with pytest.raises(ConfigError, match=r"parallelism\.bucketing"):
        scenario_from_mapping(tiny(parallelism={"bucketing": "some_chunks"}))
