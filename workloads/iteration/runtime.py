"""The simulated cluster as a SimPy API: GPUs with streams, ``yield``-able transfers.

A :class:`Cluster` is a live simulation of one :class:`~topology.Topology`: it owns a
:class:`~simcore.Simulation` (``env``, the flow network, tracer, seed) and a
:class:`~collectives.Communicator` on it, so a user can write their own SimPy process
against the cluster instead of describing a job in a scenario file::

    cluster = Cluster(build_cluster({"preset": "switch", "gpus": 8}), gpu="h100")

    def step(cluster):
        yield cluster.env.all_of([gpu.compute(duration_s=1e-3) for gpu in cluster.gpus])
        yield cluster.all_reduce(cluster.gpus, 256e6)

    cluster.process(step(cluster))
    cluster.run()

Two kinds of shared thing, two SimPy idioms (see DESIGN.md, "How SimPy is used"):

* A GPU **stream** (:class:`Stream`) runs one kernel at a time, in launch order: it *is*
  a ``simpy.Resource`` of capacity 1.  ``with gpu.compute.request() as req: yield req``
  works as for any resource; ``gpu.compute(duration_s=...)`` or
  ``gpu.compute(flops=..., efficiency=...)`` is the convenience process that holds the
  stream for one kernel.  Each GPU has a ``compute`` and a ``comm`` stream, and any
  further named stream on demand (:meth:`Gpu.stream`).
* A **link** is not a resource: a resource hands out whole slots, one holder after
  another, whereas a link's bandwidth is *shared* by every flow crossing it at once,
  max-min fairly.  So transfers and collectives (:meth:`Cluster.send`,
  :meth:`Cluster.all_reduce`, …) are flows in the simulation's
  :class:`~simcore.FlowNetwork`: concurrent calls slow each other down exactly where their
  links overlap.  Each returns a process that fires when the last byte lands; its value
  is a :class:`~collectives.CollectiveRecord`.  A call first holds a stream on every
  GPU it involves — ``comm`` unless told another (``stream="dp"``) — as an NCCL kernel
  does, so calls on one stream run one after another, as a communicator's do; with
  ``stream=None`` it holds none and runs at once beside anything else.

Requests for streams are made when a kernel or call is *launched*, not when its process
first runs, so a stream serves work in the order the user launched it (CUDA semantics),
and calls that hold several GPUs' streams queue on each in the same order, which keeps
them from deadlocking one another.  The built-in training iteration
(:mod:`workloads.iteration`) takes faster paths behind this API and does not use it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy
from distsim_gpu.collectives import PROTOCOLS, CollectiveRecord, CommParams, Communicator
from distsim_gpu.simcore.config import check_choice, check_number
from distsim_gpu.simcore.errors import ConfigError, closest
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.specs.gpus import GpuSpec, get_gpu
from simpy.resources.resource import Request

__all__ = ["COMM", "COMPUTE", "Cluster", "Gpu", "KernelRecord", "Stream"]

#: Names of the two streams every GPU has from the start.
COMPUTE = "compute"
COMM = "comm"


@dataclass(frozen=True, slots=True)
class KernelRecord:
    """One finished kernel: launched at ``launch_s``, ran on its stream from ``start_s`` to
    ``end_s`` (seconds); the gap before ``start_s`` was spent queued behind other work."""

    gpu: str
    stream: str
    name: str
    launch_s: float
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def queued_s(self) -> float:
        return self.start_s - self.launch_s


class Stream(simpy.Resource):
    """One in-order queue of a GPU: a ``simpy.Resource`` of capacity 1.

    Calling it launches a kernel: ``yield gpu.compute(duration_s=2e-3)`` or
    ``yield gpu.compute(flops=4e12, efficiency=0.6)``; the process holds the stream for the
    kernel's time and its value is a :class:`KernelRecord`.
    """

    def __init__(self, gpu: Gpu, name: str) -> None:
        super().__init__(gpu.sim.env, capacity=1)
        self.gpu = gpu
        self.name = name

    def __repr__(self) -> str:
        return (f"Stream({self.gpu.name!r}, {self.name!r}, busy={self.count}, "
                f"queued={len(self.queue)})")

    def __call__(self, duration_s: float | None = None, *, flops: float | None = None,
                 efficiency: float = 1.0, precision: str = "bf16",
                 name: str = "kernel") -> simpy.Process:
        """Launch a kernel now: ``duration_s`` seconds, or ``flops`` at ``efficiency`` of
        the GPU's dense peak for ``precision``.  Fires when the kernel has finished."""
        if (duration_s is None) == (flops is None):
            raise ConfigError("give a kernel either duration_s or flops, not both or neither",
                              key="duration_s")
        if duration_s is None:
            duration_s = self.gpu.kernel_time_s(check_number(flops, key="flops"),
                                                efficiency=efficiency, precision=precision)
        duration_s = check_number(duration_s, key="duration_s")
        request = self.request()  # now, so the stream serves kernels in launch order
        return self._env.process(self._kernel(request, duration_s, name))

    def _kernel(self, request: Request, duration_s: float,
                name: str) -> Generator[simpy.Event, Any, KernelRecord]:
        env = self._env
        launch_s = env.now
        with request:
            yield request
            start_s = env.now
            yield env.timeout(duration_s)
        self.gpu.sim.tracer.span(self.gpu.name, self.name, name, start_s, env.now)
        return KernelRecord(self.gpu.name, self.name, name, launch_s, start_s, env.now)


class Gpu:
    """One GPU of a :class:`Cluster`: its name, rank, spec and streams."""

    def __init__(self, sim: Simulation, name: str, rank: int, spec: GpuSpec | None) -> None:
        self.sim = sim
        self.name = name
        self.rank = rank
        self.spec = spec
        self._streams: dict[str, Stream] = {}
        self.compute = self.stream(COMPUTE)
        self.comm = self.stream(COMM)

    def __repr__(self) -> str:
        return f"Gpu({self.name!r}, rank={self.rank})"

    def stream(self, name: str) -> Stream:
        """The stream called ``name``, made on first use (e.g. ``"dp"`` beside ``"comm"``)."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a stream name must be a non-empty string, got {name!r}",
                              key="stream")
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = Stream(self, name)
        return stream

    @property
    def streams(self) -> dict[str, Stream]:
        """Every stream made so far, by name."""
        return dict(self._streams)

    def kernel_time_s(self, flops: float, *, efficiency: float = 1.0,
                      precision: str = "bf16") -> float:
        """Seconds for ``flops`` at ``efficiency`` of the dense peak for ``precision``."""
        if self.spec is None:
            raise ConfigError(f"{self.name}: a kernel given in flops needs the GPU's spec",
                              key="gpu", hint="build the Cluster with gpu='h100' (or any "
                              "GPU preset, or a GpuSpec), or give duration_s")
        check_number(efficiency, key="efficiency", above=True, maximum=1)
        return flops / (self.spec.peak_flops(precision) * efficiency)


class Cluster:
    """A live simulation of ``topology``: GPUs with streams, transfers and collectives.

    ``params`` are the communication parameters (NCCL protocols, efficiencies, latencies;
    ``CommParams().ideal()`` for the pure bandwidth formulas); ``gpu`` a
    :class:`~workloads.GpuSpec` or preset name, needed only for kernels given in FLOPs;
    ``seed`` seeds :attr:`rng`; ``trace`` records kernels and calls as spans in
    ``sim.tracer`` (one track per GPU stream).
    """

    def __init__(self, topology: Topology, *, params: CommParams | None = None,
                 gpu: GpuSpec | str | None = None, seed: int = 0,
                 trace: bool = False) -> None:
        if not topology.gpus:
            raise ConfigError(f"{topology.name!r} has no GPU to run on", key="topology")
        self.topology = topology
        self.sim = Simulation(seed, trace=trace)
        self.communicator = Communicator(self.sim, topology, params)
        spec = get_gpu(gpu, key="gpu") if isinstance(gpu, str) else gpu
        if spec is not None and not isinstance(spec, GpuSpec):
            raise ConfigError(f"must be a GpuSpec or a GPU preset name, got {gpu!r}",
                              key="gpu")
        self.gpus: tuple[Gpu, ...] = tuple(Gpu(self.sim, name, rank, spec)
                                           for rank, name in enumerate(topology.gpus))
        self._by_name = {gpu_.name: gpu_ for gpu_ in self.gpus}

    def __repr__(self) -> str:
        return f"Cluster({self.topology!r}, now={self.now:g} s)"

    # ------------------------------------------------------------------ simulation
    @property
    def env(self) -> simpy.Environment:
        """The SimPy environment every process of this cluster runs in."""
        return self.sim.env

    @property
    def rng(self) -> np.random.Generator:
        """The simulation's random generator (seeded by ``seed``): draw from it, not from a
        global one, so a run repeats."""
        return self.sim.rng

    @property
    def now(self) -> float:
        """Current simulated time in seconds."""
        return self.sim.now

    def process(self, generator: Generator[simpy.Event, Any, Any]) -> simpy.Process:
        """Start a user process (``env.process``)."""
        return self.env.process(generator)

    def run(self, until: float | simpy.Event | None = None) -> float:
        """Run until ``until`` (a time or an event) or until nothing is left; returns now.

        A :class:`~simcore.DistsimError` raised in a process comes out as itself.
        """
        return self.sim.run(until)

    def gpu(self, name: str) -> Gpu:
        """The GPU called ``name`` (a topology name such as ``"n0.gpu3"``)."""
        found = self._by_name.get(name) if isinstance(name, str) else None
        if found is None:
            raise ConfigError(f"unknown GPU {name!r} in {self.topology.name!r}", key="gpu",
                              hint=closest(str(name), self._by_name))
        return found

    # ------------------------------------------------------------------ communication
    def send(self, src: Gpu | str, dst: Gpu | str, size_bytes: float, *,
             stream: str | None = COMM, protocol: str | None = None,
             tag: Any = None) -> simpy.Process:
        """Send ``size_bytes`` from ``src`` to ``dst`` over their route, now.

        The call first holds ``stream`` on both GPUs (None: no stream).
        """
        pair = [self._resolve(src), self._resolve(dst)]
        if pair[0] is pair[1]:
            raise ConfigError(f"a send needs two different GPUs, got {pair[0].name!r} twice",
                              key="dst")
        size_bytes = check_number(size_bytes, key="size_bytes")
        if protocol is not None:
            check_choice(protocol, PROTOCOLS, key="protocol")
        return self._launch("send", pair, stream, tag, lambda: self.communicator.send(
            pair[0].name, pair[1].name, size_bytes, protocol=protocol, tag=tag))

    def all_reduce(self, group: Iterable[Gpu | str], size_bytes: float, *,
                   stream: str | None = COMM, algorithm: str | None = None,
                   protocol: str | None = None, tag: Any = None) -> simpy.Process:
        """All-reduce a ``size_bytes`` buffer on every GPU of ``group``."""
        return self.collective("all_reduce", group, size_bytes, stream=stream,
                               algorithm=algorithm, protocol=protocol, tag=tag)

    def all_gather(self, group: Iterable[Gpu | str], size_bytes: float, *,
                   stream: str | None = COMM, protocol: str | None = None,
                   tag: Any = None) -> simpy.Process:
        """All-gather into a ``size_bytes`` buffer (the full, gathered size) on each GPU."""
        return self.collective("all_gather", group, size_bytes, stream=stream,
                               protocol=protocol, tag=tag)

    def reduce_scatter(self, group: Iterable[Gpu | str], size_bytes: float, *,
                       stream: str | None = COMM, protocol: str | None = None,
                       tag: Any = None) -> simpy.Process:
        """Reduce-scatter a ``size_bytes`` buffer (the full, unscattered size)."""
        return self.collective("reduce_scatter", group, size_bytes, stream=stream,
                               protocol=protocol, tag=tag)

    def all_to_all(self, group: Iterable[Gpu | str], size_bytes: float, *,
                   stream: str | None = COMM, protocol: str | None = None,
                   tag: Any = None) -> simpy.Process:
        """All-to-all of each GPU's ``size_bytes`` send buffer (1/n to every member)."""
        return self.collective("alltoall", group, size_bytes, stream=stream,
                               protocol=protocol, tag=tag)

    def broadcast(self, group: Iterable[Gpu | str], size_bytes: float, *,
                  root: Gpu | str | None = None, stream: str | None = COMM,
                  protocol: str | None = None, tag: Any = None) -> simpy.Process:
        """Broadcast ``size_bytes`` from ``root`` (default: the group's first GPU)."""
        return self.collective("broadcast", group, size_bytes, root=root, stream=stream,
                               protocol=protocol, tag=tag)

    def collective(self, op: str, group: Iterable[Gpu | str], size_bytes: float, *,
                   root: Gpu | str | None = None, stream: str | None = COMM,
                   algorithm: str | None = None, protocol: str | None = None,
                   tag: Any = None) -> simpy.Process:
        """Start collective ``op`` on ``group`` now (any of the communicator's operations).

        ``size_bytes`` follows nccl-tests (see :meth:`Communicator.collective`).  The
        call first holds ``stream`` on every member, in launch order: the ``comm`` stream
        by default, so calls on it run one after another as NCCL runs a communicator's;
        another name for a call that may overlap them, None for one that holds no stream.
        """
        members = self._group(group, what=op)
        size_bytes = check_number(size_bytes, key="size_bytes")
        root_name = None
        if root is not None:
            root_name = self._resolve(root).name
            if root_name not in {gpu.name for gpu in members}:
                raise ConfigError(f"root {root_name!r} is not in the {op} group", key="root",
                                  hint="valid: " + ", ".join(gpu.name for gpu in members))
        names = [gpu.name for gpu in members]
        # Plan now (cached for the call itself), so a bad op, algorithm or protocol is an
        # error here, not later inside a process that waited for its streams.
        self.communicator.choose(op, names, size_bytes, algorithm=algorithm,
                                 protocol=protocol, root=root_name)
        return self._launch(op, members, stream, tag, lambda: self.communicator.collective(
            op, names, size_bytes, algorithm=algorithm, protocol=protocol, root=root_name,
            tag=tag))

    # ------------------------------------------------------------------ internals
    def _launch(self, what: str, members: Sequence[Gpu], stream: str | None, tag: Any,
                start: Callable[[], simpy.Process]) -> simpy.Process:
        """``start()`` the call, first holding ``stream`` on ``members`` if one is named.

        Without a stream and a trace the communicator's own process is returned as is.
        """
        if stream is None and not self.sim.tracer.enabled:
            return start()
        streams = [gpu.stream(stream) for gpu in members] if stream is not None else []
        requests = [s.request() for s in streams]  # now: launch order on every stream
        return self.env.process(self._held_call(what, members, stream, requests, start))

    def _held_call(self, what: str, members: Sequence[Gpu], stream: str | None,
                   requests: list[Request], start: Callable[[], simpy.Process],
                   ) -> Generator[simpy.Event, Any, CollectiveRecord]:
        try:
            if requests:
                yield self.env.all_of(requests)
            record: CollectiveRecord = yield start()
        finally:
            for request in requests:
                request.cancel()  # if still queued (the process was interrupted)
                request.resource.release(request)
        for gpu in members:
            self.sim.tracer.span(gpu.name, stream or COMM, what, record.start_s,
                                 record.end_s, size_bytes=record.size_bytes)
        return record

    def _resolve(self, ref: Gpu | str) -> Gpu:
        if isinstance(ref, Gpu):
            if self._by_name.get(ref.name) is not ref:
                raise ConfigError(f"{ref!r} belongs to another Cluster", key="gpu",
                                  hint="use this cluster's gpus or GPU names")
            return ref
        return self.gpu(ref)

    def _group(self, group: Iterable[Gpu | str], *, what: str) -> list[Gpu]:
        if isinstance(group, (str, Gpu)):
            raise ConfigError(f"a {what} group must be a list of GPUs, got one GPU {group!r}",
                              key="group")
        if not isinstance(group, Iterable):
            raise ConfigError(f"a {what} group must be a list of GPUs, got {group!r}",
                              key="group")
        members = [self._resolve(ref) for ref in group]
        if not members:
            raise ConfigError(f"a {what} needs at least one GPU, got none", key="group")
        seen: set[str] = set()
        repeated = [g.name for g in members if g.name in seen or seen.add(g.name)]
        if repeated:
            raise ConfigError(f"a {what} lists {', '.join(dict.fromkeys(repeated))} more "
                              "than once", key="group", hint="name each GPU once")
        return members


