"""Pipeline schedules: the order in which a stage runs forward and backward passes.

A stage's program is a list of ``(pass, micro_batch, chunk)`` with pass ``"F"`` or
``"B"``; ``chunk`` is the model chunk (always 0 unless interleaved).  Model chunk ``c`` of
stage ``s`` is *virtual stage* ``c·p + s``: a forward pass takes its input from virtual
stage ``v − 1`` and a backward pass its gradient from ``v + 1``.

* **GPipe** (Huang et al. 2019): every forward, then every backward.
* **1F1B** (PipeDream-Flush, Narayanan et al. 2021 §2.2.1): ``p − s − 1`` warm-up
  forwards, then one forward and one backward in turn, then the remaining backwards; the
  same bubble as GPipe, ``(p − 1)/(m + p − 1)``, with at most ``p − s`` micro-batches in
  flight.
* **Interleaved 1F1B** (Narayanan et al. 2021 §2.2.2, Megatron-LM's schedule): ``v``
  chunks per stage, micro-batches in groups of ``p``; warm-up ``2·(p − s − 1) + (v − 1)·p``
  chunk-passes; the bubble shrinks by ``v`` to ``(p − 1)/(v·m)`` of the ideal time.
"""

from __future__ import annotations

from distsim_gpu.simcore.errors import ConfigError

__all__ = ["Step", "stage_program", "virtual_stage"]

Step = tuple[str, int, int]


def virtual_stage(stage: int, chunk: int, pp: int) -> int:
    """The position of ``chunk`` of ``stage`` in the whole model's sequence of chunks."""
    return chunk * pp + stage


def _interleaved_unit(k: int, *, pp: int, chunks: int, forward: bool) -> tuple[int, int]:
    """(micro_batch, chunk) of the k-th forward (or backward) of an interleaved stage."""
    in_group = k % (pp * chunks)
    chunk = in_group // pp
    if not forward:
        chunk = chunks - 1 - chunk
    micro_batch = (k // (pp * chunks)) * pp + k % pp
    return micro_batch, chunk


def stage_program(schedule: str, *, pp: int, stage: int, microbatches: int,
                  interleave: int = 1) -> list[Step]:
    """The passes stage ``stage`` of ``pp`` runs, in order, for one iteration."""
    m = microbatches
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if schedule == "1f1b":
        warmup = min(pp - stage - 1, m)
        program: list[Step] = [("F", i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            program.append(("F", warmup + i, 0))
            program.append(("B", i, 0))
        program.extend(("B", i, 0) for i in range(m - warmup, m))
        return program
    if schedule == "interleaved":
        v = interleave
        total = m * v
        warmup = total if m == pp else min((pp - stage - 1) * 2 + (v - 1) * pp, total)
        program = []
        for k in range(warmup):
            mb, chunk = _interleaved_unit(k, pp=pp, chunks=v, forward=True)
            program.append(("F", mb, chunk))
        for k in range(total - warmup):
            mb, chunk = _interleaved_unit(warmup + k, pp=pp, chunks=v, forward=True)
            program.append(("F", mb, chunk))
            mb, chunk = _interleaved_unit(k, pp=pp, chunks=v, forward=False)
            program.append(("B", mb, chunk))
        for k in range(total - warmup, total):
            mb, chunk = _interleaved_unit(k, pp=pp, chunks=v, forward=False)
            program.append(("B", mb, chunk))
        return program
    raise ConfigError(f"unknown schedule {schedule!r}", key="parallelism.schedule",
                      hint="valid: gpipe, 1f1b, interleaved")
