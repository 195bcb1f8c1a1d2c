"""The headline what-ifs as a performance engineer asks them (faster HBM, NICs, NVLink; an
oversubscribed fabric; a straggler): each key takes effect, and the iteration moves the
way physics says it must."""

from __future__ import annotations

from pathlib import Path

import pytest
from distsim_gpu.measured.chakra import load_chakra
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario, spec_of
from distsim_gpu.simcore.config import parse_assignment
from distsim_gpu.simcore.errors import DistsimError
from distsim_gpu.workloads.iteration.ops import Compute
from distsim_gpu.workloads.iteration.simulator import simulate_iteration
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.traces.chakra import export_chakra, run_chakra
from distsim_gpu.workloads.traces.chakra_export import iteration_graphs


def _without_gpu(tiny):
    """The tiny scenario on two DGX H100 nodes, its GPU left to the cluster (the documented
    default of ``compute.gpu``)."""
    data = tiny(parallelism={"tp": 4, "pp": 2, "dp": 2}, training={"global_batch": 4})
    data["cluster"] = {"preset": "dgx-h100", "nodes": 2}
    del data["compute"]["gpu"]
    return data


def test_faster_hbm_on_the_clusters_own_gpu_is_one_set(tmp_path, tiny, write_scenario):
    # It was refused ("compute.gpu: missing peak_flops, memory, sm_count"): a mapping
    # without a preset had to describe a whole GPU, though the GPU was the cluster's.
    path = write_scenario(tmp_path / "s.yaml", _without_gpu(tiny))
    base = load_scenario(path)
    h100 = get_gpu("h100-sxm")
    assert base.gpu == h100
    fast = load_scenario(path, [parse_assignment("compute.gpu.memory_bandwidth=6.7 TB/s")])
    assert fast.gpu.memory_bandwidth_bytes_per_s == 2 * h100.memory_bandwidth_bytes_per_s
    assert fast.gpu.peak_flops_per_s == h100.peak_flops_per_s
    assert (fast.gpu.memory_bytes, fast.gpu.sm_count) == (h100.memory_bytes, h100.sm_count)
    assert run_scenario(fast).iteration_time_s < run_scenario(base).iteration_time_s

    # A cluster without a known GPU still names what a GPU without a preset must give.
    partial = tiny(compute={"gpu": {"memory_bandwidth": "4 TB/s"}})  # the ideal switch
    with pytest.raises(DistsimError, match=r"missing peak_flops, memory, sm_count"):
        load_scenario(write_scenario(tmp_path / "partial.yaml", partial))


def test_a_straggling_gpu_does_not_slow_the_hosts_offloaded_optimizer_step():
    # ZeRO-Offload on one V100: the GPU's forward and backward, then it waits for the
    # gradients' trip to the host, CPU-Adam and the parameters' trip back.  A GPU 1.2x as
    # slow slows only its own work: T = 1.2·(T₁ − host) + host.  It slowed all of it
    # (8.758 s where 8.047 s is right), the host's CPU and PCIe included.
    path = Path(__file__).parents[2] / "scenarios" / "examples" / "zero-offload-10b-1-v100.yaml"
    base = run_scenario(load_scenario(path))
    slow = run_scenario(load_scenario(path, [parse_assignment("stragglers.n0.gpu0=1.2")]))
    (step,) = base.offload
    scenario = load_scenario(path)
    host_s = step.exposed_s(bucket_params=scenario.parallel.bucket_params, gpu_work_s=0.0,
                            delayed=False)
    assert host_s > 1.0  # seconds: PCIe both ways and CPU-Adam
    expected_s = 1.2 * (base.iteration_time_s - host_s) + host_s
    assert slow.iteration_time_s == pytest.approx(expected_s, rel=1e-9)
    assert slow.critical_path[-1].label.startswith("optimizer step (offloaded)")
    assert slow.critical_path[-1].end_s - slow.critical_path[-1].start_s == pytest.approx(
        host_s, rel=1e-9)


def test_the_chakra_export_of_a_straggler_keeps_the_hosts_offloaded_step(tmp_path):
    # The export scaled the host's step by the GPU's factor too: its graph ran 8.758 s.
    path = Path(__file__).parents[2] / "scenarios" / "examples" / "zero-offload-10b-1-v100.yaml"
    spec = spec_of(load_scenario(path, [parse_assignment("stragglers.n0.gpu0=1.2")]))
    plain, _world = iteration_graphs(spec_of(load_scenario(path)))
    graphs, _world = iteration_graphs(spec)

    def host_steps(of):
        return [node.duration_s for node in of[0]
                if isinstance(node.op, Compute) and node.op.host]

    assert len(host_steps(graphs)) == 1 and host_steps(graphs) == host_steps(plain)
    export_chakra(graphs, tmp_path)
    run = run_chakra(load_chakra([tmp_path]), spec.topology, spec.comm)
    assert run.time_s == pytest.approx(simulate_iteration(spec).iteration_time_s, rel=1e-9)
