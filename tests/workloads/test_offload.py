"""Offload (ZeRO-Offload / ZeRO-Infinity): bytes, times and memory against closed forms,
the iteration's exposed step, and clear errors for what is not modelled."""

from __future__ import annotations

from typing import Any

import pytest
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.presets import (
    DGX_A100,
    DGX_H100,
    PCIE_GEN4_X16_BYTES_PER_S,
    PCIE_GEN5_X16_BYTES_PER_S,
    PCIE_HOP_LATENCY_S,
)
from distsim_gpu.workloads.cost.memory import memory_of_strategy, memory_per_gpu
from distsim_gpu.workloads.iteration.offload_step import offload_step
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.offload import (
    CPU_ADAM_BYTES_PER_PARAM,
    CPU_ADAM_EFFICIENCY,
    OffloadConfig,
    cpu_adam_bytes_per_param,
    host_bytes_per_gpu,
    offload_from_mapping,
    pcie_bytes_per_iteration,
)
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    parallel_from_mapping,
)
from hypothesis import given, settings
from hypothesis import strategies as st

CPU = OffloadConfig("cpu")
A100_NODE = build_cluster({"preset": "dgx-a100", "nodes": 1})
H100_NODE = build_cluster({"preset": "dgx-h100", "nodes": 1})


@given(st.floats(1e6, 1e11), st.integers(1, 64))
def test_pcie_bytes_are_two_psi_each_way(psi: float, microbatches: int) -> None:
    assert pcie_bytes_per_iteration(psi, CPU, microbatches=microbatches) == (2 * psi, 2 * psi)
    both = OffloadConfig("cpu", "cpu")
    out, back = pcie_bytes_per_iteration(psi, both, microbatches=microbatches)
    # + the 16-bit shard fetched for every forward and backward of every micro-batch
    assert (out, back) == (2 * psi, pytest.approx(2 * psi + 2 * microbatches * 2 * psi))
    assert pcie_bytes_per_iteration(psi, OffloadConfig()) == (0.0, 0.0)


@settings(max_examples=20, deadline=None)
@given(st.floats(1e7, 1e10))
def test_transfer_times_are_bytes_over_pcie_shared_at_the_switch(psi: float) -> None:
    # DGX H100: one GPU per Gen5 switch -> each GPU alone on its uplink.
    step = offload_step(H100_NODE, H100_NODE.gpus_on_node(0), psi, CPU)
    latency = 2 * PCIE_HOP_LATENCY_S
    assert step.to_host_s == pytest.approx(2 * psi / PCIE_GEN5_X16_BYTES_PER_S + latency)
    assert step.to_gpu_s == pytest.approx(step.to_host_s)
    # DGX A100: two GPUs behind each Gen4 switch share its uplink, max-min fair.
    step = offload_step(A100_NODE, A100_NODE.gpus_on_node(0), psi, CPU)
    assert step.to_host_s == pytest.approx(2 * 2 * psi / PCIE_GEN4_X16_BYTES_PER_S + latency)
    # One GPU alone does not share it.
    alone = offload_step(A100_NODE, ["n0.gpu0"], psi, CPU)
    assert alone.to_host_s == pytest.approx(2 * psi / PCIE_GEN4_X16_BYTES_PER_S + latency)


def test_cpu_step_is_memory_bound_per_socket() -> None:
    psi = 1e9
    step = offload_step(A100_NODE, A100_NODE.gpus_on_node(0), psi, CPU)
    assert DGX_A100.host is not None
    socket_bw = DGX_A100.host.memory_bandwidth_bytes_per_s
    assert socket_bw == 8 * 3200e6 * 8  # 8 channels of DDR4-3200 per EPYC 7742
    # four GPUs per socket, 28 B per parameter at half the DRAM peak
    assert step.adam_s == pytest.approx(4 * psi * CPU_ADAM_BYTES_PER_PARAM
                                        / (socket_bw * CPU_ADAM_EFFICIENCY))
    assert step.nvme_s == 0.0
    assert step.cpu_path_s == pytest.approx(step.to_host_s + step.adam_s + step.to_gpu_s)
    # the node's host holds 14 B per parameter of each of its eight GPUs' shards
    assert step.host_bytes == pytest.approx(8 * 14 * psi)
    assert step.param_fetch_s == 0.0


def test_parameter_fetches_are_counted_per_pass() -> None:
    psi, microbatches = 1e8, 4
    gpus = H100_NODE.gpus_on_node(0)
    step = offload_step(H100_NODE, gpus, psi, OffloadConfig("cpu", "cpu"),
                        microbatches=microbatches)
    fetched = 2 * microbatches * 2 * psi  # a forward and a backward per micro-batch
    latency = 2 * PCIE_HOP_LATENCY_S
    assert step.param_fetch_s == pytest.approx(fetched / PCIE_GEN5_X16_BYTES_PER_S + latency)
    on_nvme = offload_step(H100_NODE, gpus, psi, OffloadConfig("nvme", "nvme"),
                           microbatches=microbatches)
    host = DGX_H100.host
    assert host is not None
    # first off the drives (all eight GPUs' shards through the RAID), then over PCIe
    assert on_nvme.param_fetch_s == pytest.approx(
        step.param_fetch_s + 8 * fetched / (8 * host.drive_read_bytes_per_s))


def test_nvme_step_reads_and_writes_the_state_on_the_drives() -> None:
    psi = 1e9
    step = offload_step(H100_NODE, H100_NODE.gpus_on_node(0), psi, OffloadConfig("nvme"))
    host = DGX_H100.host
    assert host is not None and host.drives == 8
    state = 12 * 8 * psi
    expected = (state / (8 * host.drive_read_bytes_per_s)
                + state / (8 * host.drive_write_bytes_per_s))
    assert step.nvme_s == pytest.approx(expected)
    assert step.step_s == max(step.adam_s, step.nvme_s) == step.nvme_s
    # the state is on the drives, only the gradients in host memory
    assert step.host_bytes == pytest.approx(8 * 2 * psi)


def test_host_and_gpu_memory_follow_zero_offload_accounting() -> None:
    # ZeRO-Offload §3: GPU keeps the 16-bit parameters (2 B/param), the host the 16-bit
    # gradients and the 12 B of fp32 state (14 B/param); ZeRO-2 shards both over dp.
    psi = 1e9
    assert host_bytes_per_gpu(psi, CPU) == (14 * psi, 0.0)
    assert host_bytes_per_gpu(psi, OffloadConfig("nvme")) == (2 * psi, 12 * psi)
    assert host_bytes_per_gpu(psi, OffloadConfig("cpu", "cpu")) == (16 * psi, 0.0)
    assert host_bytes_per_gpu(psi, OffloadConfig("nvme", "nvme")) == (2 * psi, 14 * psi)
    model = ModelSpec(name="m", layers=4, hidden=1024, heads=16, seq_len=512, vocab=32000)
    training = TrainingConfig(micro_batch=1, global_batch=4, precision="fp16")
    kwargs: dict[str, Any] = dict(seq_len=512, microbatches=1, stage=0,
                                  flash_attention=True)
    plain = memory_of_strategy(model, ParallelConfig(dp=4, zero=2), training, **kwargs)
    off = memory_of_strategy(model, ParallelConfig(dp=4, zero=2, offload=CPU), training,
                             **kwargs)
    params = plain.weights_bytes / 2
    assert plain.optimizer_bytes == pytest.approx(12 * params / 4)
    assert off.weights_bytes == plain.weights_bytes == pytest.approx(2 * params)
    assert off.gradients_bytes == off.optimizer_bytes == 0.0
    assert off.activations_bytes == plain.activations_bytes
    both = memory_of_strategy(model, ParallelConfig(dp=4, zero=3, offload=OffloadConfig(
        "cpu", "cpu")), training, **kwargs)
    assert both.weights_bytes == 0.0
    # nothing offloaded: exactly the unchanged formula
    assert plain == memory_per_gpu(model, ParallelConfig(dp=4, zero=2),
                                   TrainingConfig(micro_batch=1, seq_len=512,
                                                  precision="fp16"), flash_attention=True)


def test_offload_none_leaves_the_resolved_config_as_it_was() -> None:
    assert "offload" not in ParallelConfig().to_dict()
    config = parallel_from_mapping({"zero": 2, "offload": {"optimizer": "cpu"}})
    assert config.to_dict()["offload"] == {"optimizer": "cpu", "params": "none",
                                           "delayed_update": False}
    assert parallel_from_mapping({"offload": {}}) == ParallelConfig()


def _scenario(offload: dict[str, Any] | None, *, zero: int = 2, layers: int = 4,
              host: dict[str, Any] | None = None) -> dict[str, Any]:
    parallelism: dict[str, Any] = {"tp": 1, "pp": 1, "dp": 1, "zero": zero}
    if offload is not None:
        parallelism["offload"] = dict(offload, host=host or {
            "memory": "64 GB", "memory_bandwidth": "100 GB/s"})
    return {
        "name": "offload-test",
        "cluster": {"name": "one", "nodes": 1, "pcie": {"bandwidth": "16 GB/s"},
                    "node": {"gpu_pcie_switch": [0], "nic_pcie_switch": [0],
                             "pcie_switch_cpu": [0]}},
        "model": {"name": "m", "layers": layers, "hidden": 1024, "heads": 16,
                  "seq_len": 512, "vocab": 32000},
        "parallelism": parallelism,
        "training": {"micro_batch": 4, "global_batch": 8, "precision": "fp16"},
        "compute": {"gpu": "v100-32gb"},
    }


@pytest.mark.parametrize(("grad_precision", "grad_bytes"), [("fp16", 2), ("fp32", 4)])
def test_iteration_charges_the_exposed_step_and_delayed_update_hides_it(
        grad_precision: str, grad_bytes: int) -> None:
    """The gradients leave at the width they are reduced in: fp32 main gradients (the
    stacks' default) move, sit in host memory and feed CPU-Adam at 4 bytes a parameter,
    DeepSpeed's fp16 ones at 2.  Until 7 December every run moved 2."""
    data = _scenario(None)
    data["parallelism"]["grad_reduce_precision"] = grad_precision
    base = run_scenario(scenario_from_mapping(data))
    data = _scenario({"optimizer": "cpu"})
    data["parallelism"]["grad_reduce_precision"] = grad_precision
    sc = scenario_from_mapping(data)
    off = run_scenario(sc)
    params = sc.model.total_params()
    gpu_step = sc.costs.optimizer_step_time_s(params)
    # one GPU, one socket: the last 40M-parameter bucket's share of the gradients' trip
    # out (the rest overlaps backward), Adam, all the 16-bit parameters back
    out = grad_bytes * params / 16e9 + 2 * PCIE_HOP_LATENCY_S
    back = 2 * params / 16e9 + 2 * PCIE_HOP_LATENCY_S
    adam = params * (24 + grad_bytes + 2) / (100e9 * CPU_ADAM_EFFICIENCY)
    share = sc.parallel.bucket_params / params
    assert 0 < share < 1
    assert off.iteration_time_s == pytest.approx(
        base.iteration_time_s - gpu_step + share * out + adam + back, rel=1e-9)
    data["parallelism"]["offload"]["delayed_update"] = True
    delayed = run_scenario(scenario_from_mapping(data))
    # the CPU path (~0.3 s) is longer than this small model's GPU work: only the excess
    assert base.iteration_time_s - gpu_step < delayed.iteration_time_s
    assert delayed.iteration_time_s == pytest.approx(out + back + adam, rel=1e-6)


def test_host_memory_and_pcie_bytes_follow_the_gradient_width() -> None:
    psi = 1e9
    assert host_bytes_per_gpu(psi, CPU, grad_bytes=4) == (16 * psi, 0.0)
    assert pcie_bytes_per_iteration(psi, CPU, grad_bytes=4) == (4 * psi, 2 * psi)
    assert cpu_adam_bytes_per_param(4) == CPU_ADAM_BYTES_PER_PARAM + 2


@pytest.mark.parametrize(("offload", "zero", "host", "words"), [
    ({"optimizer": "cpu"}, 0, None, "needs parallelism.zero >= 1"),
    ({"optimizer": "cpu", "params": "cpu"}, 2, None, "needs ZeRO-3"),
    ({"params": "cpu"}, 3, None, "without the optimizer state"),
    ({"optimizer": "disk"}, 2, None, "offload target"),
    ({"optimizer": "cpu", "delayed": True}, 2, None, "delayed"),
    ({"optimizer": "cpu"}, 2, {"memory": "1 GB", "memory_bandwidth": "100 GB/s"},
     "out of host memory"),
    ({"optimizer": "nvme"}, 2, {"memory": "64 GB", "memory_bandwidth": "100 GB/s",
                                "drives": 0}, "needs NVMe drives"),
    ({"optimizer": "cpu"}, 2, {"memory": "64 GB"}, "memory_bandwidth"),
    # four drives and no figure for them: refused by name, not timed at 1 B/s
    ({"optimizer": "nvme"}, 2, {"memory": "64 GB", "memory_bandwidth": "100 GB/s",
                                "drives": 4}, "no drive_read_bandwidth or drive_write"),
    ({"optimizer": "nvme"}, 2, {"memory": "64 GB", "memory_bandwidth": "100 GB/s",
                                "drives": 4, "drive_read_bandwidth": "6 GB/s"},
     "no drive_write_bandwidth"),
    ({"optimizer": "cpu"}, 2, {"memory": "64 GB", "memory_bandwidth": "100 GB/s",
                               "adam_efficiency": 2}, "fraction"),
])
def test_bad_offload_is_a_clear_error(offload: dict[str, Any], zero: int,
                                      host: dict[str, Any] | None, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as raised:
        data = _scenario(offload, zero=zero, host=host)
        if host is not None:
            data["parallelism"]["offload"]["host"] = host
        run_scenario(scenario_from_mapping(data))
    assert "offload" in str(raised.value)


def test_a_node_without_a_host_is_refused() -> None:
    data = _scenario({"optimizer": "cpu"})
    data["cluster"] = {"preset": "switch", "gpus": 1}
    with pytest.raises(ConfigError, match="no PCIe path to a CPU"):
        run_scenario(scenario_from_mapping(data))


def test_offload_mapping_reads_units() -> None:
    config = offload_from_mapping({"optimizer": "NVMe", "host": {
        "memory": "1.5 TB", "memory_bandwidth": "128 GB/s", "drives": 4,
        "drive_read_bandwidth": "3 GB/s", "drive_write_bandwidth": "2 GB/s"}})
    assert config.optimizer == "nvme"
    assert dict(config.host) == {"memory": 1.5e12, "memory_bandwidth": 128e9, "drives": 4.0,
                                 "drive_read_bandwidth": 3e9, "drive_write_bandwidth": 2e9}


def test_an_nvme_offload_on_the_presets_estimated_drives_is_a_note() -> None:
    data = _scenario({"optimizer": "nvme"}, host={"memory": "1 TB"})
    data["cluster"] = {"preset": "dgx-a100", "nodes": 1}
    data["parallelism"].update({"dp": 8})
    data["training"]["global_batch"] = 32
    data["compute"] = {"gpu": "a100-80gb"}
    report = run_scenario(scenario_from_mapping(data))
    notes = {note.key: note for note in report.notes if note.kind == "defaulted"
             and note.key.startswith("parallelism.offload")}
    assert set(notes) == {"parallelism.offload.host.drive_read_bandwidth",
                          "parallelism.offload.host.drive_write_bandwidth"}
    assert "6.5 GB/s per drive" in notes["parallelism.offload.host.drive_read_bandwidth"].message
    data["parallelism"]["offload"]["host"]["drive_read_bandwidth"] = "7 GB/s"
    data["parallelism"]["offload"]["host"]["drive_write_bandwidth"] = "4 GB/s"
    report = run_scenario(scenario_from_mapping(data))
    assert not [note for note in report.notes if note.kind == "defaulted"
                and note.key.startswith("parallelism.offload")]


def test_the_offloaded_step_is_host_time_not_gpu_compute(examples_dir) -> None:
    """ZeRO-Offload's 10B example on one V100: the GPU computes its forward and backward
    (the run without offload less its own optimizer step) and waits for the host the
    closed form of the offloaded step — the last 16-bit gradient bucket's share of
    ``2Ψ / PCIe``, CPU-Adam's ``28Ψ / (DRAM · efficiency)`` and ``2Ψ / PCIe`` back — as
    ``host`` time, its own category in the per-GPU breakdown and on the critical path.
    Until 7 December that wait was counted as compute (the example read "compute 100 %")."""
    path = examples_dir / "zero-offload-10b-1-v100.yaml"
    sc = load_scenario(path)
    off = run_scenario(sc)
    base = run_scenario(load_scenario(path, [("parallelism.offload.optimizer", "none")]),
                        allow_oom=True)
    params = sc.model.total_params()
    pcie = 2 * params / 15.75e9 + 2 * PCIE_HOP_LATENCY_S  # one way, GPU to socket
    adam = params * CPU_ADAM_BYTES_PER_PARAM / (256e9 * CPU_ADAM_EFFICIENCY)
    share = min(1.0, sc.parallel.bucket_params / params)
    (gpu,), (base_gpu,) = off.per_gpu, base.per_gpu
    assert gpu.host_s == pytest.approx(share * pcie + adam + pcie, rel=1e-9)
    assert gpu.compute_s == pytest.approx(
        base_gpu.compute_s - sc.costs.optimizer_step_time_s(params), rel=1e-9)
    assert gpu.compute_s + gpu.host_s + gpu.exposed_communication_s + gpu.bubble_s \
        + gpu.idle_s == pytest.approx(off.iteration_time_s, rel=1e-12)
    by_kind = off.bottlenecks["critical_path"]["by_kind"]
    assert by_kind["host"]["seconds"] == pytest.approx(gpu.host_s, rel=1e-9)
    assert sum(k["seconds"] for k in by_kind.values()) == pytest.approx(
        off.iteration_time_s, rel=1e-12)
    assert by_kind["compute"]["seconds"] == pytest.approx(gpu.compute_s, rel=1e-9)
    text = off.to_json_dict()["per_gpu"][0]
    assert text["host_s"] == gpu.host_s
