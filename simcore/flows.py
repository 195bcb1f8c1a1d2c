"""Flows and the link sets they cross: the records a :class:`~.network.FlowNetwork`
moves bytes with.

A :class:`LinkSet` resolves link ids and multiplicities to network indices once (also as
arrays and a bit set); a :class:`Flow` is one transfer over a link set, whose ``done``
event fires when its last byte lands.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from typing import Any, Protocol

import numpy as np
from simpy.core import Environment
from simpy.events import Event

__all__ = ["Flow", "FlowOwner", "LinkId", "LinkSet"]

LinkId = Hashable


class FlowOwner(Protocol):
    """What a flow reads of its network: the rates and bytes left by solver handle, kept
    there while the incremental solver runs."""

    env: Environment
    _h_rate: np.ndarray
    _h_remaining: np.ndarray


class LinkSet:
    """Links a flow crosses with their multiplicities, resolved to network indices once.

    Made by :meth:`FlowNetwork.link_set`; a collective that sends the same shape of flow
    many times (one per algorithm step, one per call of a sweep) resolves it once.
    """

    __slots__ = ("ids", "index_array", "indices", "mask", "mult_array", "multiplicities")

    def __init__(self, ids: tuple[LinkId, ...], indices: tuple[int, ...],
                 multiplicities: tuple[float, ...]) -> None:
        self.ids = ids
        self.indices = indices
        self.multiplicities = multiplicities
        self.index_array = np.fromiter(indices, np.int64, len(indices))
        self.mult_array = np.fromiter(multiplicities, float, len(multiplicities))
        # The links as a bit set (bit i: link index i), so that whether two flows share
        # a link is one ``&`` of two ints (see FlowNetwork._component).
        if indices:
            bits = np.zeros(max(indices) + 1, bool)
            bits[self.index_array] = True
            self.mask = int.from_bytes(np.packbits(bits, bitorder="little").tobytes(),
                                       "little")
        else:
            self.mask = 0

    def __len__(self) -> int:
        return len(self.indices)


class Flow:
    """One transfer: bytes over weighted links after a latency; ``done`` fires at the end.

    Hot object, so ``__slots__`` and plain attributes.  ``links`` are internal link
    indices of the owning network, ``multiplicities`` parallel to them; ``link_ids`` the
    ids they were given by.  ``rate_bytes_per_s`` and ``remaining_bytes`` (the bytes left
    when its rate last changed) are read through: while the incremental solver runs, the
    network keeps them in arrays by solver handle and updates many at once.
    """

    __slots__ = (
        "_done",
        "_done_ref",
        "_finish_s",
        "_handle",
        "_link_array",
        "_link_set",
        "_mask",
        "_mult_array",
        "_net",
        "_rate",
        "_remaining",
        "_updated_s",
        "_version",
        "finish_s",
        "id",
        "latency_s",
        "link_ids",
        "links",
        "multiplicities",
        "size_bytes",
        "start_s",
        "tag",
        "transfer_start_s",
    )

    def __init__(self, flow_id: int, links: LinkSet, size_bytes: float, latency_s: float,
                 start_s: float, done: Event, tag: Any, net: FlowOwner) -> None:
        self.id = flow_id
        self._net = net
        self.link_ids = links.ids
        self.links = links.indices
        self.multiplicities = links.multiplicities
        # The same incidence as arrays, for assembling a solve without a Python loop.
        self._link_array = links.index_array
        self._link_set = links  # what its solves are kept by (FlowNetwork._solve_rates)
        self._mult_array = links.mult_array
        self._mask = links.mask
        self.size_bytes = size_bytes
        self._remaining = size_bytes
        self.latency_s = latency_s
        self.start_s = start_s
        self.transfer_start_s: float | None = None
        self.finish_s: float | None = None
        self._rate = 0.0
        self._done: Event | None = done
        self._done_ref: weakref.ref[Event] | None = None
        self.tag = tag
        self._updated_s = start_s
        self._version = 0
        self._finish_s = float("inf")
        self._handle = -1  # its slot in the incremental solver, if one runs

    @property
    def done(self) -> Event:
        """The event that fires with this flow (its value) when its last byte lands.

        Once it has fired the flow holds it only weakly (see :meth:`release_done`); should
        nobody else hold it any more, an equal one is made: processed, with this flow as
        its value, as the original would read.
        """
        event = self._done
        if event is None:
            event = self._done_ref()
            if event is None:
                event = self._done = Event(self._net.env)
                event._ok = True
                event._value = self
                event.callbacks = None  # processed: yielding it resumes at once
        return event

    def release_done(self) -> None:
        """Hold the fired ``done`` event weakly from now on.

        The event holds the flow (its value) and the flow held the event: a cycle, so
        every finished flow waited for the cyclic garbage collector (about 7 % of a
        512-GPU MoE run's CPU).  Weakly held, both are freed by reference counting once
        nobody else holds them; the event is on the simulation's queue until processed.
        """
        event = self._done
        if event is not None:
            self._done_ref = weakref.ref(event)
            self._done = None

    @property
    def rate_bytes_per_s(self) -> float:
        """Its max-min fair rate now (0 before it transfers and once it finished)."""
        if self._handle >= 0:
            return float(self._net._h_rate[self._handle])
        return self._rate

    @property
    def remaining_bytes(self) -> float:
        """Bytes left when its rate last changed (0 once it finished)."""
        if self._handle >= 0:
            return float(self._net._h_remaining[self._handle])
        return self._remaining

    def __repr__(self) -> str:
        return (f"Flow(id={self.id}, size_bytes={self.size_bytes:g}, "
                f"remaining_bytes={self.remaining_bytes:g}, rate={self.rate_bytes_per_s:g})")
