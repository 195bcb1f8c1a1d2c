"""Every parameter's gradient crosses the data-parallel group, whatever the ZeRO stage:
the bytes a GPU sends per iteration against the closed forms DeepSpeed's and FSDP's
documentation give (ring collectives over ``n`` GPUs move ``(n-1)/n`` of their size a GPU
per reduce-scatter or all-gather), and each stage's buckets against its own parameters
(ZeRO-2 at several micro-batches a step: test_zero2_accumulation.py).

Before 7 December the output layer of an untied model (Llama, Mistral, DeepSeek), the
final norm, a learned position embedding and a pipeline's last-stage copy of a tied
embedding were in no bucket, so their gradients were never reduced; ZeRO-3 gathered
none of them."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.scenarios.report.bottlenecks import link_summary
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost import traffic
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy import schedule as pipeline
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig, chunk_layers

DP, M = 8, 2
# Llama-like: untied output layer, RMSNorm, rotary positions; and a GPT-like tied one
# with learned positions.
LLAMA = model_from_mapping({"name": "llama", "layers": 4, "hidden": 1024, "heads": 16,
                            "seq_len": 512, "vocab": 32000, "tied_embeddings": False,
                            "position": "rotary", "norm": "rmsnorm"})
GPT = model_from_mapping({"name": "gpt", "layers": 4, "hidden": 1024, "heads": 16,
                          "seq_len": 512, "vocab": 32000})
RING = CommParams(protocol="simple", algorithm="ring")


def _sent_bytes(uniform, model, parallel: ParallelConfig) -> float:
    """Data-parallel bytes GPU 0 sends over its one link to the switch in an iteration."""
    topo = build_cluster({"preset": "switch", "gpus": DP, "link_bandwidth": "50 GB/s",
                          "link_latency": "1 us"})
    result = uniform.run(topo, parallel, TrainingConfig(micro_batch=1, global_batch=DP * M,
                                                        precision="bf16"),
                         model=model, comm=RING)
    rows = link_summary(result, top=4 * DP)["top_links_by_utilisation"]
    (row,) = [r for r in rows if r["link"] == "n0.gpu0->n0.switch"]
    return row["bytes_by_traffic"]["dp"]


@pytest.mark.parametrize("model", [LLAMA, GPT], ids=["untied", "tied"])
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_a_gpu_sends_the_closed_form_of_its_zero_stage(uniform, model, zero):
    """ZeRO-0: one all-reduce of every bf16 gradient, 2·(n-1)/n·2Ψ; ZeRO-1: a
    reduce-scatter of the gradients and an all-gather of the updated parameters, the
    same bytes; ZeRO-2: the reduce-scatter every micro-batch (DeepSpeed's stage 2), the
    gather once; ZeRO-3/FSDP, each micro-batch: every parameter gathered for the forward,
    the layers' again for the backward (the root unit, embeddings and output layer, is
    kept), and every gradient reduce-scattered."""
    psi = model.total_params()
    layers = sum(model.layer_params(i) for i in range(model.layers))
    share = (DP - 1) / DP
    expected = {0: 2 * share * 2 * psi, 1: 2 * share * 2 * psi,
                2: (M + 1) * share * 2 * psi}.get(zero, M * share * 2 * (psi + layers + psi))
    parallel = ParallelConfig(dp=DP, zero=zero, grad_reduce_precision="bf16")
    assert _sent_bytes(uniform, model, parallel) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("model", [LLAMA, GPT], ids=["untied", "tied"])
@pytest.mark.parametrize(("pp", "schedule", "interleave"),
                         [(1, "1f1b", 1), (2, "1f1b", 1), (2, "interleaved", 2),
                          (2, "dualpipev", 2)])
def test_each_stage_buckets_every_gradient_it_holds(model, pp, schedule, interleave):
    """The buckets of a stage's chunks carry exactly the gradients of the parameters it
    holds (the last stage's output layer or tied copy and final norm included)."""
    parallel = ParallelConfig(pp=pp, dp=2, schedule=schedule, interleave=interleave,
                              bucket_params=10**6)
    bounds = chunk_layers(model.layers, pp, interleave, schedule=schedule)
    entries, _ = pipeline.route_ends(schedule, pp, interleave)
    for stage in range(pp):
        carried = 0.0
        for chunk in range(interleave):
            vs = pipeline.virtual_stage(stage, chunk, pp, schedule)
            order = list(reversed(range(*bounds[vs])))
            carried += sum(b.size_bytes for b in traffic.gradient_buckets(
                model, parallel, order, first_chunk=vs in entries,
                head_bytes=traffic.head_grad_bytes(model, parallel, vs)))
        assert carried == pytest.approx(traffic.stage_grad_bytes(model, parallel, stage),
                                        rel=1e-12), stage
