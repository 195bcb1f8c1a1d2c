"""How a model's layers are cut into pipeline chunks (virtual stages): evenly, or as
Megatron-DeepSpeed's ``embedding`` method counts the embedding and the output layer as a
layer each (``parallelism.partition``)."""

from __future__ import annotations

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.strategy.schedule import BIDIRECTIONAL, model_chunks

__all__ = ["PARTITIONS", "chunk_layers", "layer_partition"]

PARTITIONS = ("uniform", "embedding")


def layer_partition(layers: int, parts: int, partition: str = "uniform",
                    ) -> list[tuple[int, int]]:
    """``(first, stop)`` layer indices of each of ``parts`` pipeline chunks, in order.

    ``uniform``: ``layers/parts`` each (must divide).  ``embedding``: Megatron-DeepSpeed's
    ``type:transformer|embedding`` method — the word embedding and the output layer count
    as one layer each, and the ``layers + 2`` units are split as evenly as possible, the
    first chunks taking one more when they do not divide (DeepSpeed's
    ``partition_uniform``).  BLOOM-176B's 70 layers on 12 stages: 5, 6, …, 6, 5.
    """
    if partition == "uniform":
        if layers % parts:
            raise ConfigError(f"{layers} layers do not split into {parts} equal chunks",
                              key="parallelism.partition",
                              hint="choose pp·interleave dividing the layers, or "
                              "partition: embedding")
        size = layers // parts
        return [(i * size, (i + 1) * size) for i in range(parts)]
    units = layers + 2
    base, extra = divmod(units, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    # Unit 0 is the embedding and unit layers+1 the output layer: shift to layer indices.
    return [(max(a - 1, 0), min(b - 1, layers)) for a, b in bounds]


def chunk_layers(layers: int, pp: int, interleave: int, partition: str = "uniform",
                 schedule: str = "1f1b") -> list[tuple[int, int]]:
    """``(first, stop)`` layer indices of each virtual stage: the layers cut into
    :func:`~workloads.strategy.schedule.model_chunks` chunks, each placed twice under
    DualPipe (virtual stages ``k`` and ``pp + k``, one a direction)."""
    parts = layer_partition(layers, model_chunks(schedule, pp, interleave), partition)
    return parts + parts if schedule in BIDIRECTIONAL else parts
