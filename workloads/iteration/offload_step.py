"""The offloaded optimizer step as it runs: flows over PCIe, Adam on the host's sockets.

What :mod:`workloads.strategy.offload` configures, simulated on the real node:

1. **gradients to the host** — every GPU of the node sends its ``g·Ψ`` bytes of
   gradients (``Ψ`` its shard, ``g`` the bytes of ``grad_reduce_precision``: 2 for the
   paper's fp16, 4 for fp32 main gradients) to the CPU socket its PCIe switch hangs
   from, all at once, as flows on the topology's own PCIe links: GPUs that share a PCIe
   switch share its uplink (a DGX A100 puts two GPUs behind each Gen4 switch), max-min
   fair;
2. **the step on the host** — each socket runs CPU-Adam over the shards of the GPUs
   attached to it, memory bound (:func:`~workloads.strategy.offload.cpu_adam_time_s`); with the
   state on NVMe the drives' read and write of it runs beside, chunk by chunk, and the
   slower of the two sets the step (:func:`~workloads.strategy.offload.nvme_step_time_s`);
3. **parameters back** — ``2·Ψ`` bytes of updated 16-bit parameters, host to GPU, as
   flows again.

In the iteration the GPU's own optimizer step gives way to what of this it waits for, a
host step (:attr:`~workloads.iteration.ops.Compute.host`) that a straggling GPU's factor
does not slow.
ZeRO-Offload moves gradients bucket by bucket while backward still runs, so only the last
bucket's share of step 1 is exposed (an assumption: backward is long enough to hide the
rest, true whenever the PCIe time of the gradients is below the last micro-batch's
backward), then steps 2 and 3 in full.  With ``delayed_update`` the whole CPU path runs
beside the next iteration's forward and backward: only what exceeds the GPU's work in
the stream (its compute and fused collectives) is exposed.

With ``params`` offloaded the shard is fetched again before each forward and backward;
ZeRO-Infinity prefetches it a layer ahead, so it is reported
(:attr:`OffloadStep.param_fetch_s`) but not charged: the report says when it exceeds the
GPU's work and so could not hide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.simcore.units import format_duration
from distsim_gpu.topology.model import Topology
from distsim_gpu.topology.presets import HostFigure
from distsim_gpu.workloads.cost.traffic import optimizer_params
from distsim_gpu.workloads.iteration.ops import Compute, Fused, Op, TpOverlap
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.offload import (
    OffloadConfig,
    adam_efficiency,
    cpu_adam_time_s,
    host_bytes_per_gpu,
    host_figure,
    nvme_step_time_s,
    param_fetch_bytes,
    pcie_bytes_per_iteration,
)
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, Placement
from distsim_gpu.workloads.strategy.precision import grad_element_bytes

__all__ = ["OPTIMIZER_STEP_LABEL", "OffloadStep", "check_host_memory", "gpu_work_s",
           "host_route", "offload_lines", "offload_step", "offload_streams", "pcie_links_from",
           "pcie_transfer_s"]

#: The label of the GPU's optimizer step in a stage's stream (workloads.iteration.streams).
OPTIMIZER_STEP_LABEL = "optimizer step"


@dataclass(frozen=True, slots=True)
class OffloadStep:
    """One node's offloaded step: bytes per GPU and the time of each part (seconds)."""

    shard_params: float
    to_host_bytes: float
    to_gpu_bytes: float
    to_host_s: float
    adam_s: float
    nvme_s: float
    to_gpu_s: float
    param_fetch_s: float
    host_bytes: float
    host_capacity_bytes: float

    @property
    def step_s(self) -> float:
        """The host's step: CPU-Adam, or the drives when they are slower."""
        return max(self.adam_s, self.nvme_s)

    @property
    def cpu_path_s(self) -> float:
        """Gradients out, the step, parameters back: the CPU path of one iteration."""
        return self.to_host_s + self.step_s + self.to_gpu_s

    def to_dict(self) -> dict[str, float]:
        """Every field and the derived times (bytes, seconds)."""
        data = {f: getattr(self, f) for f in self.__dataclass_fields__}
        data.update(step_s=self.step_s, cpu_path_s=self.cpu_path_s)
        return data

    def exposed_s(self, *, bucket_params: float, gpu_work_s: float, delayed: bool) -> float:
        """What the GPU waits for at the iteration's end (module docstring): the last
        gradient bucket's share of the trip out, the step, the parameters back."""
        if delayed:
            return max(0.0, self.cpu_path_s - gpu_work_s)
        share = min(1.0, bucket_params / self.shard_params) if self.shard_params else 0.0
        return share * self.to_host_s + self.step_s + self.to_gpu_s


def pcie_links_from(topology: Topology) -> dict[str, list[str]]:
    """Each device's PCIe neighbours (the directed links of kind ``pcie`` leaving it)."""
    out: dict[str, list[str]] = {}
    for link in topology.links():
        if link.kind == "pcie":
            out.setdefault(link.src, []).append(link.dst)
    return out


def host_route(topology: Topology, gpu: str,
               pcie: dict[str, list[str]] | None = None) -> list[tuple[str, str]]:
    """The directed PCIe links from ``gpu`` up to the first CPU socket (breadth first;
    ``pcie``: :func:`pcie_links_from`, computed when not given)."""
    pcie = pcie_links_from(topology) if pcie is None else pcie
    parents: dict[str, tuple[str, str] | None] = {gpu: None}
    frontier = [gpu]
    while frontier:
        following: list[str] = []
        for name in frontier:
            if topology.device(name).kind == "cpu":
                path: list[tuple[str, str]] = []
                step = parents[name]
                while step is not None:
                    path.append(step)
                    step = parents[step[0]]
                return path[::-1]
            for dst in pcie.get(name, ()):
                if dst not in parents:
                    parents[dst] = (name, dst)
                    following.append(dst)
        frontier = following
    raise ConfigError(f"{gpu} has no PCIe path to a CPU socket in {topology.name!r}",
                      key="parallelism.offload",
                      hint="offload needs a node with a host (not the 'switch' preset)")


def pcie_transfer_s(topology: Topology, routes: Sequence[list[tuple[str, str]]],
                    size_bytes: float) -> float:
    """All ``routes`` move ``size_bytes`` at once as flows (max-min fair): when the last
    byte lands."""
    sim = Simulation()
    network = sim.network
    for route in routes:
        for src, dst in route:
            if not network.has_link((src, dst)):
                network.add_link((src, dst), topology.link(src, dst).bandwidth_bytes_per_s)
    finish = [0.0]

    def landed(_event: object) -> None:
        finish[0] = max(finish[0], sim.now)

    for route in routes:
        latency = sum(topology.link(src, dst).latency_s for src, dst in route)
        network.transfer(route, size_bytes, latency, tag="offload").done.callbacks.append(
            landed)
    sim.run()
    return finish[0]


def offload_step(topology: Topology, gpus: Sequence[str], shard_params: float,
                 offload: OffloadConfig, *, microbatches: int = 1,
                 host: HostFigure | None = None, grad_bytes: float = 2.0) -> OffloadStep:
    """The offloaded step of the node holding ``gpus`` (each with a shard of
    ``shard_params`` parameters), from its host figures (default: the cluster's), the
    gradients ``grad_bytes`` an element."""
    host = host or host_figure(topology.config, offload)
    fetch_in = param_fetch_bytes(shard_params, offload, microbatches=microbatches)
    out_bytes, back_bytes = pcie_bytes_per_iteration(shard_params, offload,
                                                     microbatches=microbatches,
                                                     grad_bytes=grad_bytes)
    back_bytes -= fetch_in  # the step's parameters back; the fetches are apart
    pcie = pcie_links_from(topology)
    routes = [host_route(topology, gpu, pcie) for gpu in gpus]
    per_socket: dict[str, int] = {}
    for route in routes:
        per_socket[route[-1][1]] = per_socket.get(route[-1][1], 0) + 1
    efficiency = adam_efficiency(offload)
    adam_s = max(cpu_adam_time_s(n * shard_params, host, efficiency, grad_bytes=grad_bytes)
                 for n in per_socket.values())
    nvme_s = (nvme_step_time_s(len(gpus) * shard_params, host)
              if offload.optimizer == "nvme" else 0.0)
    up = [[(b, a) for a, b in reversed(route)] for route in routes]
    fetch_s = pcie_transfer_s(topology, up, fetch_in) if fetch_in else 0.0
    if offload.params == "nvme":  # and through the drives first, every GPU's at once
        fetch_s += len(gpus) * fetch_in / (max(host.drives, 1) * host.drive_read_bytes_per_s)
    host_bytes = len(gpus) * host_bytes_per_gpu(shard_params, offload,
                                                grad_bytes=grad_bytes)[0]
    return OffloadStep(shard_params, out_bytes, back_bytes,
                       pcie_transfer_s(topology, routes, out_bytes), adam_s, nvme_s,
                       pcie_transfer_s(topology, up, back_bytes), fetch_s, host_bytes,
                       host.memory_bytes)


def check_host_memory(step: OffloadStep, node: int, source: str | None = None) -> None:
    """A clear error when the node's host memory cannot hold what is offloaded to it."""
    if step.host_bytes > step.host_capacity_bytes:
        gib = 2.0**30
        raise ConfigError(
            f"out of host memory: node {node} needs {step.host_bytes / gib:.1f} GiB for the "
            f"offloaded gradients and state of its GPUs, and has "
            f"{step.host_capacity_bytes / gib:.1f} GiB", key="parallelism.offload",
            source=source, hint="offload the optimizer to nvme, shard over more GPUs "
            "(dp), or give the host's memory (parallelism.offload.host.memory)")


def offload_lines(steps: Sequence[OffloadStep]) -> list[str]:
    """The report's offload section: per pipeline stage, bytes over PCIe and the CPU path."""
    if not steps:
        return []
    gb, gib = 1e9, 2.0**30
    lines = ["", "Offloaded optimizer step per pipeline stage (one node's GPUs at once):"]
    for stage, s in enumerate(steps):
        lines.append(
            f"  stage {stage}: {s.shard_params / 1e9:.4g}B params per GPU; PCIe "
            f"{s.to_host_bytes / gb:.3g} GB out in {format_duration(s.to_host_s)}, "
            f"{s.to_gpu_bytes / gb:.3g} GB back in {format_duration(s.to_gpu_s)}; CPU-Adam "
            f"{format_duration(s.adam_s)}"
            + (f", NVMe {format_duration(s.nvme_s)}" if s.nvme_s else "")
            + f"; host memory {s.host_bytes / gib:.4g} of {s.host_capacity_bytes / gib:.4g} "
            "GiB" + (f"; parameter fetches {format_duration(s.param_fetch_s)} (not charged: "
                     "prefetched)" if s.param_fetch_s else ""))
    return lines


def gpu_work_s(stream: Sequence[Op]) -> float:
    """The GPU's own work in a stream: compute and fused collectives, the step excluded."""
    total = 0.0
    for op in stream:
        if isinstance(op, Compute) and op.label != OPTIMIZER_STEP_LABEL:
            total += op.duration_s
        elif isinstance(op, Fused):
            total += sum(d for s, d in zip(op.steps, op.durations_s, strict=True)
                         if s.label != OPTIMIZER_STEP_LABEL)
        elif isinstance(op, TpOverlap):  # its GEMM (the chunks' transfers run beside it)
            total += op.stretched_gemm_s
    return total


def _replace_step(stream: list[Op], step_s: float) -> list[Op]:
    """``stream`` with its optimizer step lasting ``step_s`` (a plain or fused op)."""
    new = Compute(step_s, f"{OPTIMIZER_STEP_LABEL} (offloaded)", host=True)
    out: list[Op] = []
    for op in stream:
        if isinstance(op, Compute) and op.label == OPTIMIZER_STEP_LABEL:
            op = new
        elif isinstance(op, Fused) and any(s.label == OPTIMIZER_STEP_LABEL for s in op.steps):
            steps = tuple(new if s.label == OPTIMIZER_STEP_LABEL else s for s in op.steps)
            durations = tuple(step_s if s.label == OPTIMIZER_STEP_LABEL else d
                              for s, d in zip(op.steps, op.durations_s, strict=True))
            compute = sum(d for s, d in zip(steps, durations, strict=True)
                          if isinstance(s, Compute))
            host = sum(d for s, d in zip(steps, durations, strict=True)
                       if isinstance(s, Compute) and s.host)  # as fuse() counts it
            op = replace(op, steps=steps, durations_s=durations, compute_s=compute,
                         host_s=host)
        out.append(op)
    return out


def offload_streams(topology: Topology, model: ModelSpec, parallel: ParallelConfig,
                    streams: list[list[Op]], *, microbatches: int,
                    source: str | None = None) -> tuple[list[list[Op]], list[OffloadStep]]:
    """Each stage's stream with its optimizer step offloaded, and each stage's
    :class:`OffloadStep` (simulated on the node of the stage's first GPU)."""
    placement = Placement(parallel)
    steps: list[OffloadStep] = []
    out: list[list[Op]] = []
    for stage, stream in enumerate(streams):
        first = topology.gpus[placement.replica_rank(0, 0, stage)]
        node = topology.node_of(first)
        step = offload_step(topology, topology.gpus_on_node(node),
                            optimizer_params(model, parallel, stage), parallel.offload,
                            microbatches=microbatches,
                            grad_bytes=grad_element_bytes(parallel.grad_reduce_precision))
        check_host_memory(step, node, source)
        exposed = step.exposed_s(bucket_params=parallel.bucket_params,
                                 gpu_work_s=gpu_work_s(stream),
                                 delayed=parallel.offload.delayed_update)
        steps.append(step)
        out.append(_replace_step(stream, exposed))
    return out, steps
