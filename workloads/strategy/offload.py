"""Offload: optimizer state (and parameters) in CPU memory or on NVMe, the step on the CPU.

**ZeRO-Offload** (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model
Training", USENIX ATC): mixed-precision Adam's fp32 master weights, momentum and variance
(K = 12 bytes per parameter) live in host memory, and so do the gradients: after
backward each GPU sends its gradient shard to the host (2 bytes per parameter over its
PCIe link in the paper's fp16), the CPU runs Adam on it, and the updated 16-bit
parameters come back (2 bytes per parameter) before the next forward.  The GPU keeps only
the 16-bit parameters (2 bytes per parameter, the paper's "2M on GPU"); the host holds the
12 bytes of state and the 2 bytes of gradient (the paper's "14M on CPU").  The gradients
leave at the width they are reduced in (``parallelism.grad_reduce_precision``): 4 bytes
a parameter out, in host memory and read by CPU-Adam where they are fp32 main gradients
(a ``grad_bytes`` argument below; DeepSpeed's FP16 optimizer's are 2).  It builds on ZeRO-2:
with data parallelism each GPU offloads and updates only its ``1/dp`` shard.  With
**delayed parameter update** (the paper's DPU, ``delayed_update: true``) the CPU step of
iteration ``i`` runs beside iteration ``i + 1``'s forward and backward, which then use
parameters one step old: the step costs time only where the CPU path is longer than the
GPU's work.

**ZeRO-Infinity** (Rajbhandari et al. 2021) and **Angel-PTM** (Nie et al. 2023): the
state may sit on NVMe instead (``optimizer: nvme``), read and written once per step
through the node's drives (in RAID 0), overlapped chunk by chunk with the CPU's Adam;
and with ZeRO-3 the 16-bit parameters themselves may live off the GPU (``params: cpu`` or
``nvme``), fetched for each forward and backward.

Written in a scenario as::

    parallelism:
      zero: 2
      offload: {optimizer: cpu, params: none, delayed_update: false}
      # host: {memory: 1.5 TB, memory_bandwidth: 128 GB/s, drives: 0, ...} overrides the
      #       cluster preset's host figures (topology.presets.HostFigure)

This module holds the configuration, the host's figures and the closed forms; the flows
and the step's place in the iteration are :mod:`workloads.iteration.offload_step`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from distsim_gpu.simcore.config import check_bool, check_choice, check_keys, check_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.units import parse_bandwidth, parse_size
from distsim_gpu.topology.preset_registry import NODE_PRESETS
from distsim_gpu.topology.presets import HostFigure

__all__ = [
    "CPU_ADAM_BYTES_PER_PARAM",
    "CPU_ADAM_EFFICIENCY",
    "HOST_KEYS",
    "NO_OFFLOAD",
    "OFFLOAD_TARGETS",
    "OffloadConfig",
    "adam_efficiency",
    "check_offload",
    "cpu_adam_bytes_per_param",
    "cpu_adam_time_s",
    "host_bytes_per_gpu",
    "host_figure",
    "nvme_step_time_s",
    "offload_from_mapping",
    "param_fetch_bytes",
    "pcie_bytes_per_iteration",
]

OFFLOAD_TARGETS = ("none", "cpu", "nvme")
HOST_KEYS = ("memory", "memory_bandwidth", "drives", "drive_read_bandwidth",
             "drive_write_bandwidth", "adam_efficiency")

# CPU-Adam moves per parameter: reads and writes the fp32 master weight, momentum and
# variance (3 x 4 x 2 = 24 B), reads the gradient (2 B at 16 bits) and writes the 16-bit
# parameter the GPU gets back (2 B): 28 bytes with 16-bit gradients
# (cpu_adam_bytes_per_param for others).  The step is memory bound on a server CPU
# (ZeRO-Offload §4.2 vectorises it with AVX so that it is).
CPU_ADAM_BYTES_PER_PARAM = 28.0
# The share of the sockets' peak DRAM bandwidth CPU-Adam achieves.  STREAM-like kernels
# reach ~60-80 % of peak on two-socket servers; Adam's seven streams and its arithmetic get
# less.  An assumption, not a measurement (override: parallelism.offload.host.adam_efficiency).
CPU_ADAM_EFFICIENCY = 0.5
# Bytes per parameter offloaded (ZeRO paper §3.1, mixed precision): 16-bit weight and
# gradient, K = 12 bytes of fp32 optimizer state.
_WEIGHT_BYTES, _GRAD_BYTES, _STATE_BYTES = 2.0, 2.0, 12.0


def cpu_adam_bytes_per_param(grad_bytes: float = _GRAD_BYTES) -> float:
    """The DRAM bytes CPU-Adam moves a parameter with gradients of ``grad_bytes``:
    :data:`CPU_ADAM_BYTES_PER_PARAM` with the gradient's width in place of 2."""
    return CPU_ADAM_BYTES_PER_PARAM - _GRAD_BYTES + grad_bytes


@dataclass(frozen=True, slots=True)
class OffloadConfig:
    """Where the optimizer state and the 16-bit parameters live (module docstring).

    ``host`` holds overrides of the host's figures as ``(key, value)`` pairs in SI units
    (bytes, bytes/s; ``adam_efficiency`` a fraction), keys from :data:`HOST_KEYS`.
    """

    optimizer: str = "none"
    params: str = "none"
    delayed_update: bool = False
    host: tuple[tuple[str, float], ...] = ()

    @property
    def enabled(self) -> bool:
        """Whether anything is offloaded."""
        return self.optimizer != "none" or self.params != "none"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"optimizer": self.optimizer, "params": self.params,
                                "delayed_update": self.delayed_update}
        if self.host:  # a count of drives is whole: written back, it must read back
            data["host"] = {key: int(value) if key == "drives" else value
                            for key, value in self.host}
        return data


#: Nothing offloaded (ParallelConfig's default).
NO_OFFLOAD = OffloadConfig()


def offload_from_mapping(value: object, *, source: str | None = None,
                         prefix: str = "parallelism.offload") -> OffloadConfig:
    """An :class:`OffloadConfig` from its YAML mapping (an ``OffloadConfig`` passes)."""
    if isinstance(value, OffloadConfig):
        return value
    data = check_mapping(value, key=prefix, source=source, optional=True)
    check_keys(data, ("optimizer", "params", "delayed_update", "host"), prefix=prefix,
               source=source)
    targets = {key: check_choice(str(data.get(key, "none")).lower(), OFFLOAD_TARGETS,
                                 key=f"{prefix}.{key}", source=source,
                                 what="offload target")
               for key in ("optimizer", "params")}
    delayed = check_bool(data.get("delayed_update", False), key=f"{prefix}.delayed_update",
                         source=source)
    return OffloadConfig(targets["optimizer"], targets["params"], delayed,
                         _host_overrides(data.get("host"), source, f"{prefix}.host"))


def _host_overrides(value: object, source: str | None,
                    prefix: str) -> tuple[tuple[str, float], ...]:
    data = check_mapping(value, key=prefix, source=source, optional=True)
    check_keys(data, HOST_KEYS, prefix=prefix, source=source)
    result: list[tuple[str, float]] = []
    for key, raw in data.items():
        where = f"{prefix}.{key}"
        if key == "memory":
            number = parse_size(raw, key=where, source=source, allow_zero=False)
        elif key == "drives":
            if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= 1024:
                raise ConfigError(f"must be a whole number of drives 0..1024, got {raw!r}",
                                  key=where, source=source)
            number = float(raw)
        elif key == "adam_efficiency":
            if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 < raw <= 1:
                raise ConfigError(f"must be a fraction in (0, 1], got {raw!r}", key=where,
                                  source=source)
            number = float(raw)
        else:
            number = parse_bandwidth(raw, key=where, source=source)
        result.append((key, float(number)))
    return tuple(result)


def check_offload(offload: OffloadConfig, *, zero: int, fsdp: bool, precision: str,
                  source: str | None = None, prefix: str = "parallelism.offload") -> None:
    """The combinations ZeRO-Offload / ZeRO-Infinity run, else a :class:`ConfigError`."""
    if not offload.enabled:
        return
    if offload.optimizer == "none":
        raise ConfigError("offloading the parameters without the optimizer state is not "
                          "modelled", key=f"{prefix}.params", source=source,
                          hint="set optimizer: cpu or nvme as well (ZeRO-Infinity does)")
    if zero == 0 and not fsdp:
        raise ConfigError("offload builds on ZeRO: it needs parallelism.zero >= 1",
                          key=f"{prefix}.optimizer", source=source,
                          hint="ZeRO-Offload runs with zero: 2 (zero: 3 to offload params)")
    if offload.params != "none" and zero != 3 and not fsdp:
        raise ConfigError(f"params: {offload.params} needs ZeRO-3 (parameters sharded and "
                          f"gathered layer by layer), not zero {zero}",
                          key=f"{prefix}.params", source=source, hint="set zero: 3")
    if precision == "fp32":
        raise ConfigError("offload is modelled for mixed precision (16-bit weights and "
                          "gradients, fp32 state on the host), not fp32 training",
                          key=f"{prefix}.optimizer", source=source,
                          hint="training.precision: bf16 or fp16")


def host_figure(cluster_config: Mapping[str, Any], offload: OffloadConfig, *,
                source: str | None = None) -> HostFigure:
    """The host's figures: the cluster preset's, with the scenario's overrides."""
    preset = NODE_PRESETS.get(str(cluster_config.get("preset")))
    base = preset.host if preset is not None else None
    given = dict(offload.host)
    if base is None:
        missing = [k for k in HOST_KEYS[:2] if k not in given]
        if missing:
            name = preset.name if preset is not None else "this cluster"
            raise ConfigError(f"{name} has no host figures; offload needs "
                              f"{', '.join(missing)}", key="parallelism.offload.host",
                              source=source, hint="e.g. host: {memory: 1 TB, "
                              "memory_bandwidth: 200 GB/s, drives: 0}")
        base = HostFigure(given["memory"], given["memory_bandwidth"], 0, 1.0, 1.0)
    fields = {"memory": "memory_bytes", "memory_bandwidth": "memory_bandwidth_bytes_per_s",
              "drives": "drives", "drive_read_bandwidth": "drive_read_bytes_per_s",
              "drive_write_bandwidth": "drive_write_bytes_per_s"}
    changes = {fields[k]: (int(v) if k == "drives" else v) for k, v in given.items()
               if k in fields}
    if preset is None or preset.host is None or not preset.host.drives:
        # Drives nobody described: their bandwidth is a figure the run needs, not a default.
        unknown = [k for k in ("drive_read_bandwidth", "drive_write_bandwidth")
                   if k not in given]
        if changes.get("drives") and unknown:
            raise ConfigError(f"{int(given['drives'])} drives, but no "
                              f"{' or '.join(unknown)}: the NVMe offload's time needs them",
                              key=f"parallelism.offload.host.{unknown[0]}", source=source,
                              hint="e.g. host: {drives: 4, drive_read_bandwidth: 6.5 GB/s, "
                              "drive_write_bandwidth: 3.5 GB/s}")
    return replace(base, **changes)


def adam_efficiency(offload: OffloadConfig) -> float:
    """CPU-Adam's share of peak DRAM bandwidth: the scenario's, else the default."""
    return dict(offload.host).get("adam_efficiency", CPU_ADAM_EFFICIENCY)


def host_bytes_per_gpu(shard_params: float, offload: OffloadConfig, *,
                       grad_bytes: float = _GRAD_BYTES) -> tuple[float, float]:
    """(host memory, NVMe) bytes one GPU's offloaded shard of ``shard_params`` takes.

    The gradients always land in host memory (``grad_bytes`` a parameter); the 12 B of state
    in host memory or on NVMe; with ``params`` offloaded the 16-bit weights too (2 B).
    """
    host = nvme = 0.0
    if offload.optimizer == "none":
        return host, nvme
    host += grad_bytes * shard_params
    state = _STATE_BYTES * shard_params
    weights = _WEIGHT_BYTES * shard_params
    if offload.optimizer == "cpu":
        host += state
    else:
        nvme += state
    if offload.params == "cpu":
        host += weights
    elif offload.params == "nvme":
        nvme += weights
    return host, nvme


def pcie_bytes_per_iteration(shard_params: float, offload: OffloadConfig, *,
                             microbatches: int = 1,
                             grad_bytes: float = _GRAD_BYTES) -> tuple[float, float]:
    """(GPU -> host, host -> GPU) bytes one GPU moves over PCIe per iteration.

    Optimizer offload: ``grad_bytes·Ψ`` of gradients out and ``2·Ψ`` of updated 16-bit
    parameters back, ``Ψ`` the GPU's shard.  Parameters offloaded: the shard is fetched
    again for each forward and each backward of every micro-batch (``2·2·Ψ·m`` more in).
    """
    if offload.optimizer == "none":
        return 0.0, 0.0
    out = grad_bytes * shard_params
    back = _WEIGHT_BYTES * shard_params
    return out, back + param_fetch_bytes(shard_params, offload, microbatches=microbatches)


def param_fetch_bytes(shard_params: float, offload: OffloadConfig, *,
                      microbatches: int = 1) -> float:
    """Bytes of offloaded 16-bit parameters one GPU fetches per iteration: its shard before
    each forward and each backward of every micro-batch, ``2·2·Ψ·m`` (0 unless ``params``
    is offloaded)."""
    if offload.params == "none":
        return 0.0
    return 2 * microbatches * _WEIGHT_BYTES * shard_params


def cpu_adam_time_s(socket_params: float, host: HostFigure, efficiency: float, *,
                    grad_bytes: float = _GRAD_BYTES) -> float:
    """One socket's Adam step over ``socket_params`` parameters: memory bound,
    ``Ψ · 28 B / (DRAM bandwidth · efficiency)`` with 16-bit gradients."""
    return socket_params * cpu_adam_bytes_per_param(grad_bytes) / (
        host.memory_bandwidth_bytes_per_s * efficiency)


def nvme_step_time_s(node_params: float, host: HostFigure) -> float:
    """Reading and writing back the node's 12 B-per-parameter state on its drives (RAID 0:
    the drives' bandwidths add); raises when the node has none."""
    if host.drives < 1:
        raise ConfigError("optimizer: nvme needs NVMe drives, and this node has none",
                          key="parallelism.offload.optimizer",
                          hint="set parallelism.offload.host.drives, or offload to cpu")
    state = _STATE_BYTES * node_params
    return (state / (host.drives * host.drive_read_bytes_per_s)
            + state / (host.drives * host.drive_write_bytes_per_s))
