"""Goodput over a whole job: failures, checkpoints, restarts, lost work.

A long training job runs iterations of a simulated length ``T``; every ``k`` iterations it
writes a checkpoint, which stops training for ``δ``: its bytes through the storage's
bandwidth (:func:`checkpoint_time_s`), and, where the cluster has storage nodes, as flows
from every GPU of the job to them over the fabric (:func:`checkpoint_flows_s`).  A
component fails now and then — each kind (GPU, node, NIC, switch) with its own mean time
between failures, failures independent and memoryless, so the job as a whole fails at the
summed rate ``1/M = Σ count_i / MTBF_i`` (:func:`system_mtbf_s`).  A failure throws away
the work since the last checkpoint that finished, and the job restarts after ``R``
(detection, rescheduling, reading the checkpoint back).  *Goodput* is the share of wall
time spent on iterations that were kept.

Failures are sampled, not averaged (:func:`goodput`): the time from a restart to the next
failure is drawn from an exponential distribution of mean ``M`` with a generator seeded
from the scenario's seed; in that time the job completes ``floor(X / (kT + δ))`` segments
of ``k`` iterations and a checkpoint, and loses the rest.  That is the renewal process of
Young (1974) and Daly (2006) — failures during a restart are not counted — simulated over
the job's whole length; the iterations themselves are the simulator's (one simulated
iteration stands for all: 10⁵ iterations are not re-run in SimPy).

Young's optimum checkpoint interval is ``τ = sqrt(2 δ M)`` (J. W. Young, "A first order
approximation to the optimum checkpoint interval", CACM 17(9), 1974); Daly's higher-order
estimate ``τ = sqrt(2 δ M) (1 + sqrt(δ / 2M) / 3 + δ / 18M) − δ`` for ``δ < 2M``
(J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart
dumps", FGCS 22(3), 2006).  :func:`checkpoint_sweep` measures goodput over a range of
intervals with the same sampled failures (common random numbers, so the curve is smooth
and its peak is not noise) and compares its best with both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.simcore.config import check_number, check_whole
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import Topology

__all__ = [
    "CHECKPOINT_BYTES_PER_PARAM",
    "CheckpointSweep",
    "GoodputResult",
    "checkpoint_flows_s",
    "checkpoint_sweep",
    "checkpoint_time_s",
    "daly_interval_s",
    "goodput",
    "system_mtbf_s",
    "young_interval_s",
]

#: What a mixed-precision Adam checkpoint holds per parameter: bf16 weights (2 bytes), fp32
#: master weights (4) and the two fp32 Adam moments (8) — the model states of ZeRO
#: (Rajbhandari et al., SC 2020, §3.1) without the gradients, which are not saved.
CHECKPOINT_BYTES_PER_PARAM = 14.0


def system_mtbf_s(components: Mapping[str, tuple[int, float]]) -> float:
    """The job's mean time between failures from ``{kind: (count, mtbf_s)}``: independent
    exponential failures add their rates."""
    rate = 0.0
    for kind, (count, mtbf) in components.items():
        check_whole(count, key=f"mtbf.{kind}", minimum=0)
        rate += count / check_number(mtbf, key=f"mtbf.{kind}", above=True)
    return math.inf if rate == 0 else 1.0 / rate


def checkpoint_time_s(checkpoint_bytes: float, storage_bandwidth_bytes_per_s: float,
                      writer_bandwidths_bytes_per_s: Sequence[float] = ()) -> float:
    """How long the job stops to write a checkpoint: its bytes through the storage's
    bandwidth, or through the writers' links if those are slower (each node writes its
    share over its NICs: the bytes split evenly across ``writer_bandwidths``)."""
    check_number(checkpoint_bytes, key="checkpoint_bytes")
    storage = check_number(storage_bandwidth_bytes_per_s, key="storage_bandwidth", above=True)
    time_s = checkpoint_bytes / storage
    if writer_bandwidths_bytes_per_s:
        share = checkpoint_bytes / len(writer_bandwidths_bytes_per_s)
        time_s = max(time_s, max(share / b for b in writer_bandwidths_bytes_per_s))
    return time_s


def checkpoint_flows_s(topology: Topology, writers: Sequence[str],
                       storage_gpus: Sequence[str], checkpoint_bytes: float,
                       comm: CommParams | None = None) -> float:
    """How long writing a checkpoint takes as flows: every writer GPU sends its equal share
    of ``checkpoint_bytes`` (a fully sharded save, as Megatron-Core's distributed
    checkpointing spreads it over the data-parallel ranks) at once to a storage node's GPU
    of the same local index (its NIC's rail: round robin over the storage nodes), sharing
    the fabric max-min fairly; the time the last byte lands."""
    if not writers or not storage_gpus:
        raise ConfigError("a checkpoint write needs writers and storage nodes",
                          key="goodput.storage_nodes")
    by_index: dict[int, list[str]] = {}
    for gpu in storage_gpus:
        by_index.setdefault(topology.device(gpu).index, []).append(gpu)
    sim = Simulation()
    communicator = Communicator(sim, topology, comm)
    share = checkpoint_bytes / len(writers)
    used: dict[int, int] = {}
    for writer in writers:
        index = topology.device(writer).index
        targets = by_index.get(index) or list(storage_gpus)
        turn = used[index] = used.get(index, -1) + 1
        communicator.send(writer, targets[turn % len(targets)], share)
    sim.run()
    return sim.now


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimum compute time between checkpoints, ``sqrt(2 δ M)``."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (``δ < 2M``; else ``M``, as Daly gives)."""
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = checkpoint_s / (2.0 * mtbf_s)
    return (young_interval_s(checkpoint_s, mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9)
            - checkpoint_s)


@dataclass(frozen=True, slots=True)
class GoodputResult:
    """One checkpoint interval over the whole job (seconds)."""

    interval_iterations: int
    interval_s: float  # compute time between checkpoints, k·T
    goodput: float  # kept iteration time / wall time
    failures: int
    wall_s: float
    kept_s: float
    lost_s: float  # iterations thrown away by failures
    checkpoint_s: float  # wall time spent writing checkpoints
    restart_s: float  # wall time spent restarting


def _failure_gaps(mtbf_s: float, horizon_s: float, restart_s: float, seed: int) -> np.ndarray:
    """Times from each restart to the next failure, enough to cover ``horizon_s``."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(mtbf_s, max(16, int(2 * horizon_s / (mtbf_s + restart_s)) + 16))
    ends = np.cumsum(gaps + restart_s)
    while ends[-1] < horizon_s:  # rare: draw more
        more = rng.exponential(mtbf_s, gaps.size)
        gaps = np.concatenate([gaps, more])
        ends = np.cumsum(gaps + restart_s)
    return gaps[:int(np.searchsorted(ends, horizon_s)) + 1]


def goodput(iteration_s: float, interval_iterations: int, checkpoint_s: float,
            restart_s: float, mtbf_s: float, horizon_s: float, seed: int = 0,
            _gaps: np.ndarray | None = None) -> GoodputResult:
    """Goodput of checkpointing every ``interval_iterations`` over ``horizon_s`` of wall
    time (at least; the run ends at the failure after it), failures sampled from ``seed``
    (see the module docstring)."""
    check_number(iteration_s, key="iteration_s", above=True)
    k = check_whole(interval_iterations, key="interval_iterations")
    gaps = _gaps if _gaps is not None else _failure_gaps(mtbf_s, horizon_s, restart_s, seed)
    segment = k * iteration_s + checkpoint_s
    done = np.floor(gaps / segment)
    kept = float(done.sum()) * k * iteration_s
    writing = float(done.sum()) * checkpoint_s
    wall = float(gaps.sum()) + restart_s * gaps.size
    return GoodputResult(k, k * iteration_s, kept / wall, int(gaps.size), wall, kept,
                         wall - kept - writing - restart_s * gaps.size, writing,
                         restart_s * gaps.size)


@dataclass(frozen=True, slots=True)
class CheckpointSweep:
    """Goodput against the checkpoint interval, and the optimum against Young and Daly."""

    results: tuple[GoodputResult, ...]
    mtbf_s: float
    checkpoint_s: float
    young_s: float
    daly_s: float

    @property
    def best(self) -> GoodputResult:
        return max(self.results, key=lambda r: r.goodput)

    @property
    def at_young(self) -> GoodputResult:
        """The swept interval nearest Young's."""
        return min(self.results, key=lambda r: abs(r.interval_s - self.young_s))

    def to_dict(self) -> dict[str, object]:
        return {"mtbf_s": self.mtbf_s, "checkpoint_s": self.checkpoint_s,
                "young_interval_s": self.young_s, "daly_interval_s": self.daly_s,
                "best_interval_s": self.best.interval_s, "best_goodput": self.best.goodput,
                "goodput_at_young": self.at_young.goodput,
                "sweep": [{"interval_s": r.interval_s, "iterations": r.interval_iterations,
                           "goodput": r.goodput, "failures": r.failures}
                          for r in self.results]}


def checkpoint_sweep(iteration_s: float, checkpoint_s: float, restart_s: float,
                     mtbf_s: float, horizon_s: float, *, seed: int = 0,
                     points: int = 41, span: float = 8.0) -> CheckpointSweep:
    """Goodput for intervals spread geometrically over ``[τ/span, τ·span]`` around
    Young's ``τ`` (whole numbers of iterations, each once), all with the same failures."""
    young = young_interval_s(checkpoint_s, mtbf_s)
    gaps = _failure_gaps(mtbf_s, horizon_s, restart_s, seed)
    grid = np.geomspace(young / span, young * span, points) / iteration_s
    ks = sorted({max(1, round(float(k))) for k in grid})
    results = tuple(goodput(iteration_s, k, checkpoint_s, restart_s, mtbf_s, horizon_s,
                            _gaps=gaps) for k in ks)
    return CheckpointSweep(results, mtbf_s, checkpoint_s, young,
                           daly_interval_s(checkpoint_s, mtbf_s))
