"""Data loading: the host preparing each iteration's samples, and when the GPUs wait for it.

Every data-parallel rank's loader (PyTorch's ``DataLoader``, Megatron's dataset iterator)
turns its ``global_batch / dp`` samples of an iteration into tensors — reading, decoding,
augmenting, collating — at ``sample_time_s`` of one CPU worker per sample.

* With ``workers`` ≥ 1 loader processes prefetching, loading runs beside training: in
  steady state an iteration takes the longer of the two,
  ``max(T, samples · sample_time_s / workers)``, and the GPUs wait out the difference
  (idle time; the critical path ends with it).  The workers are assumed to have a CPU core
  each.
* With 0 workers the training process loads each micro-batch itself before computing it,
  so loading adds its whole time, ``samples · sample_time_s``, to the iteration: in a
  pipeline it is the first stage that loads, and its work is on the critical path of every
  schedule distsim runs.  The wait is drawn at the end of the iteration in both cases
  (where it falls between micro-batches is not resolved; its total is).

A language model reading pre-tokenised, memory-mapped shards spends microseconds per
sample and is never held up; image, video and audio pipelines that decode on the CPU can
be.  Without ``training.data_loader`` nothing is charged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distsim_gpu.simcore.config import check_keys, check_mapping, check_number, check_whole
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.units import parse_duration

__all__ = ["DataLoader", "data_loader_from_mapping"]


@dataclass(frozen=True, slots=True)
class DataLoader:
    """``sample_time_s`` CPU seconds per sample on one loader worker; ``workers`` loader
    processes per data-parallel rank (0: loading in the training process)."""

    sample_time_s: float
    workers: int = 1

    def __post_init__(self) -> None:
        check_number(self.sample_time_s, key="sample_time")
        check_whole(self.workers, key="workers", minimum=0)

    def loading_s(self, samples: int) -> float:
        """Seconds the loader needs for ``samples`` samples."""
        return samples * self.sample_time_s / max(self.workers, 1)

    def iteration_s(self, training_s: float, samples: int) -> float:
        """An iteration's length given ``training_s`` of simulated training and the
        ``samples`` each data-parallel rank loads (module docstring)."""
        if self.workers == 0:
            return training_s + self.loading_s(samples)
        return max(training_s, self.loading_s(samples))

    def to_dict(self) -> dict[str, Any]:
        return {"sample_time": self.sample_time_s, "workers": self.workers}


def data_loader_from_mapping(data: Any, *, source: str | None = None,
                             prefix: str = "training.data_loader") -> DataLoader:
    """A :class:`DataLoader` from ``{sample_time: "5 ms", workers: 4}`` (``workers``
    defaults to 1)."""
    data = check_mapping(data, key=prefix, source=source)
    check_keys(data, ("sample_time", "workers"), prefix=prefix, source=source)
    if "sample_time" not in data:
        raise ConfigError("needs sample_time: the CPU time one loader worker spends on one "
                          "sample", key=prefix, source=source,
                          hint='e.g. data_loader: {sample_time: "4 ms", workers: 8}')
    sample_time_s = parse_duration(data["sample_time"], key=f"{prefix}.sample_time",
                                   source=source)
    workers = check_whole(data.get("workers", 1), key=f"{prefix}.workers", minimum=0,
                          source=source)
    return DataLoader(sample_time_s, workers)
