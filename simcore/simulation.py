"""A simulation run: the SimPy environment, its flow network, its tracer and its seed.

Everything that must be unique or random per run lives here — never at module or class
level — so two runs with the same inputs and seed give the same result, in any order, in
one process or many.
"""

from __future__ import annotations

import itertools
import numbers
from heapq import heappop
from typing import Any

import distsim_gpu.simcore.progress as progress_
import numpy as np
import simpy
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.simcore.network import FlowNetwork
from distsim_gpu.simcore.trace import Tracer
from simpy.core import BoundClass, EmptySchedule, StopSimulation
from simpy.events import EventPriority

__all__ = ["CountingEnvironment", "Simulation"]

_TICK_MASK = progress_.TICK_EVENTS - 1


class CountingEnvironment(simpy.Environment):
    """A simpy environment that counts the events it processes (for benchmarks), and
    ticks ``progress`` (a :class:`~simcore.progress.Reporter`, if any) every
    :data:`~simcore.progress.TICK_EVENTS` of them.

    Events marked ``retired`` (the flow network's superseded finish timers,
    :class:`~simcore.network.FinishTimer`) are discarded unprocessed and uncounted, without
    moving the clock: ``run()`` without ``until`` ends at the last event that did something.
    """

    def __init__(self, initial_time: float = 0, *,
                 progress: progress_.Reporter | None = None) -> None:
        super().__init__(initial_time)
        # simpy binds ``process``, ``timeout``, ``event``, … to the instance only for the
        # attributes of the instance's own class, so a subclass got none bound and built a
        # bound method on every ``env.timeout(...)``: bind simpy's here, as it does.
        for name, attribute in vars(simpy.Environment).items():
            if type(attribute) is BoundClass:
                setattr(self, name, getattr(self, name))
        self.events_processed = 0
        self.progress = progress

    def _drop_retired(self) -> None:
        queue = self._queue
        while queue and getattr(queue[0][3], "retired", False):
            heappop(queue)

    def peek(self) -> Any:
        self._drop_retired()
        return super().peek()

    def step(self) -> None:
        """simpy's ``Environment.step`` with the retired events dropped first, written out
        in one frame: a run of millions of events paid two more Python calls per event
        for ``_drop_retired`` and ``super().step()``.  Same pops, same callbacks in the
        same order, same errors (simpy 4.1's ``step``, line for line)."""
        queue = self._queue
        while True:
            try:
                now, _, _, event = heappop(queue)
            except IndexError:
                raise EmptySchedule from None
            if not getattr(event, "retired", False):
                break
        self._now = now
        # Callbacks set to None first, as simpy does, so none is added while they run.
        callbacks, event.callbacks = event.callbacks, None
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            # As simpy: the callbacks not yet run wait for the run to resume.
            event.callbacks = callbacks[callbacks.index(callback) + 1:]
            self.schedule(event, EventPriority(-1))
            raise
        if not event._ok and not hasattr(event, "_defused"):
            # A failed event nobody handled crashes the run, with a fresh copy (simpy's).
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc
        self.events_processed += 1
        if not self.events_processed & _TICK_MASK and self.progress is not None:
            self.progress.tick(now)


class Simulation:
    """Owns ``env`` (simpy), ``network`` (:class:`FlowNetwork`), ``tracer`` and ``rng``."""

    def __init__(self, seed: int = 0, *, trace: bool = False) -> None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ConfigError(f"a seed must be a whole number >= 0, got {seed!r}", key="seed")
        self.seed = int(seed)
        self.env = CountingEnvironment(progress=progress_.current())
        self.network = FlowNetwork(self.env)
        self.tracer = Tracer(enabled=trace)
        self.rng = np.random.default_rng(self.seed)
        self._ids = itertools.count()

    @property
    def now(self) -> float:
        """Current simulated time in seconds."""
        return self.env.now

    def next_id(self) -> int:
        """A fresh integer id, unique within this simulation."""
        return next(self._ids)

    def run(self, until: float | simpy.Event | None = None) -> float:
        """Run until ``until`` (a time or an event) or until nothing is left; returns now.

        A :class:`~simcore.errors.DistsimError` raised inside a process comes out as
        itself: simpy re-raises a process's exception as a fresh copy built from its
        message alone, which would lose the file, key and hint.
        """
        if until is not None and not isinstance(until, simpy.Event) and not _after(until,
                                                                                 self.env.now):
            raise ConfigError(f"must be an event or a time after now ({self.env.now:g} s), "
                              f"got {until!r}", key="until")
        try:
            self.env.run(until=until)
        except DistsimError as error:
            cause = error.__cause__
            if isinstance(cause, DistsimError) and type(cause) is type(error):
                raise cause from None
            raise
        return self.env.now


def _after(until: object, now: float) -> bool:
    """Whether ``until`` is a number later than ``now`` (simpy refuses any other)."""
    return (not isinstance(until, bool) and isinstance(until, numbers.Real)
            and until > now)
