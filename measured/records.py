"""What distsim keeps of one rank's run, whatever trace format it was read from.

A :class:`RankTrace` is one GPU's view of a run: its profiled training steps
(:class:`ProfilerStep`), its GPU activity (:class:`GpuEvent`: kernels, memory copies and
sets, each with a kind and, for NCCL, the collective and message), and the CPU side
(:class:`CpuEvent`: operators, annotations, runtime calls).  The Kineto reader
(:mod:`distsim_gpu.measured.kineto`) and the reader of distsim's own trace.json
(:mod:`distsim_gpu.measured.distsim_trace`) both produce these records, so the step
summary, the replay and the cost tables read a measured run and a simulated one alike.

Times are seconds on the trace's own clock.  The small helpers that both readers need to
name what they see — the element size of a dtype as PyTorch spells it, the collective
kind of an NCCL kernel name — live here too.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DTYPE_BYTES",
    "CpuEvent",
    "GpuEvent",
    "ProfilerStep",
    "RankTrace",
    "collective_kind",
    "dtype_bytes",
]

#: Bytes per element for the ``dtype`` names PyTorch writes into NCCL kernel args.
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2,
    "char": 1, "int8": 1, "byte": 1, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "uint16": 2, "uint32": 4, "uint64": 8, "complexfloat": 8,
    "complex64": 8, "complexdouble": 16, "complex128": 16,
}

# Collective words as NCCL kernel names spell them, longest first so ``AllReduce`` is not
# read as ``Reduce``.
_COLLECTIVES: tuple[tuple[str, str], ...] = (
    ("reducescatter", "reduce_scatter"),
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("sendrecv", "sendrecv"),
    ("broadcast", "broadcast"),
    ("reduce", "reduce"),
    ("send", "send"),
    ("recv", "recv"),
)


@dataclass(frozen=True, slots=True)
class ProfilerStep:
    """One profiled training step (``ProfilerStep#N``): its ``number``, start and duration
    in seconds."""

    number: int
    start_s: float
    duration_s: float

    @property
    def end_s(self) -> float:
        """End of the step window in seconds."""
        return self.start_s + self.duration_s


@dataclass(frozen=True, slots=True)
class GpuEvent:
    """One GPU event: a kernel, memcpy or memset (times in seconds, trace clock).

    ``kind`` is ``"communication"`` (NCCL), ``"memcpy"``, ``"memset"`` or ``"compute"``.
    For NCCL kernels ``collective`` is the collective kind (``"all_reduce"``,
    ``"sendrecv"``, …) and, where the trace says, ``in_nelems``/``out_nelems``,
    ``dtype``, ``message_bytes`` (the larger of input and output element count times the
    element size, nccl-tests' "size"; ``None`` when the dtype is not recorded),
    ``group_size`` and ``group_ranks``.  ``launch_s`` is when the CPU launched it, where
    the trace links the two by ``correlation`` (kept, to find the launching CPU call).
    ``comm_op`` is the operation of the ``nccl:<op>`` annotation the kernel was launched
    in (``all_to_all`` for the ``SendRecv`` kernels that implement it); where the kernel
    args give no size, ``message_bytes`` comes from that annotation's recorded input.
    """

    name: str
    kind: str
    start_s: float
    duration_s: float
    stream: int | None = None
    device: int | None = None
    launch_s: float | None = None
    correlation: int | None = None
    collective: str | None = None
    in_nelems: int | None = None
    out_nelems: int | None = None
    dtype: str | None = None
    message_bytes: int | None = None
    group_size: int | None = None
    group_ranks: tuple[int, ...] | None = None
    comm_op: str | None = None

    @property
    def end_s(self) -> float:
        """End time in seconds."""
        return self.start_s + self.duration_s


@dataclass(frozen=True, slots=True)
class CpuEvent:
    """One CPU-side complete event (times in seconds, trace clock).

    ``category`` is Kineto's ``cat`` (``cpu_op``, ``user_annotation``, ``python_function``,
    ``cuda_runtime``, ``cuda_driver``); ``tid`` the thread.  ``correlation`` links a CUDA
    runtime call to the GPU event it launched; ``sequence`` and ``fwd_tid`` are autograd's
    ``Sequence number`` and ``Fwd thread id``; ``input_dims`` and ``input_types`` are the
    recorded shapes and dtypes of a user annotation (empty unless the profiler ran with
    ``record_shapes``; not kept for operators, which nothing reads them from).
    """

    name: str
    category: str
    tid: int | str | None
    start_s: float
    duration_s: float
    correlation: int | None = None
    sequence: int | None = None
    fwd_tid: int | None = None
    input_dims: tuple[tuple[int, ...], ...] = ()
    input_types: tuple[str, ...] = ()

    @property
    def end_s(self) -> float:
        """End time in seconds."""
        return self.start_s + self.duration_s

    def input_bytes(self, index: int = 0) -> int | None:
        """Bytes of input ``index`` from its recorded shape and dtype, where both are known
        (``None`` otherwise): how a ``nccl:*`` annotation tells its message size."""
        if index >= len(self.input_dims) or index >= len(self.input_types):
            return None
        width = dtype_bytes(self.input_types[index])
        if width is None:
            return None
        count = 1
        for extent in self.input_dims[index]:
            count *= extent
        return count * width


@dataclass(frozen=True, slots=True)
class RankTrace:
    """What distsim keeps of one rank's trace.

    ``source`` names where it was read (``archive.tar.gz:member`` for a tar member,
    ``trace.json:gpu3`` for one GPU of distsim's own trace); ``rank`` is the global rank
    where the trace tells it, else ``None``; ``skipped`` says what could not be read.
    ``gpu_events`` and ``cpu_events`` are in start order.
    """

    source: str
    rank: int | None
    world_size: int | None
    gpu_model: str | None
    steps: tuple[ProfilerStep, ...]
    gpu_events: tuple[GpuEvent, ...]
    skipped: tuple[str, ...] = ()
    cpu_events: tuple[CpuEvent, ...] = ()

    def nccl_counts(self) -> dict[str, int]:
        """Number of NCCL kernels per collective kind, over the whole trace."""
        counts: dict[str, int] = {}
        for event in self.gpu_events:
            if event.collective is not None:
                counts[event.collective] = counts.get(event.collective, 0) + 1
        return dict(sorted(counts.items()))


def dtype_bytes(name: str) -> int | None:
    """Bytes per element of a dtype as PyTorch spells it in traces (``float``, ``Float``,
    ``c10::BFloat16``, ``long int``); ``None`` if unknown.

    >>> dtype_bytes("long int"), dtype_bytes("c10::Half"), dtype_bytes("Float")
    (8, 2, 4)
    """
    key = name.strip().lower().removeprefix("c10::").replace(" ", "")
    key = {"longint": "long", "unsignedchar": "uint8", "signedchar": "int8"}.get(key, key)
    return DTYPE_BYTES.get(key)


def collective_kind(name: str, collective_arg: str | None = None) -> str:
    """The collective kind of an NCCL kernel from its name (else its ``Collective name``).

    >>> collective_kind("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, ...)")
    'all_reduce'
    >>> collective_kind("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)")
    'sendrecv'
    """
    base = name.split("(", 1)[0]
    for part in base.split("_"):
        word = part.lower()
        for key, kind in _COLLECTIVES:
            if word == key:
                return kind
    for text in (base.lower().replace("_", ""), (collective_arg or "").lower().replace("_", "")):
        for key, kind in _COLLECTIVES:
            if key in text:
                return kind
    return "other"
