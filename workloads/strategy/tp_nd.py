"""2-D, 2.5-D and 3-D tensor parallelism: the mesh, its sub-groups and each layer's
communication plan (``parallelism.tp_mode``).

Megatron's 1-D tensor parallelism (``tp_mode: 1d``, the default) splits each weight over
the ``tp`` GPUs but keeps every GPU's copy of the activations between blocks, and
all-reduces a block's output.  The other modes split weights *and* activations over a
mesh of the ``tp`` GPUs and move blocks of them along the mesh's axes:

* ``2d`` — Optimus (Xu et al., "An Efficient 2D Method for Training Super-Large Deep
  Learning Models", 2021), SUMMA on a ``q×q`` mesh (``tp = q²``).  GPU ``(i, j)`` holds
  block ``(i, j)`` of the input ``A`` (``M/q × K/q``, M the tokens) and of the weight
  ``B`` (``K/q × N/q``).  The forward ``C = A·B`` runs ``q`` steps; step ``l`` broadcasts
  ``A[i, l]`` along row ``i`` and ``B[l, j]`` along column ``j``, then multiplies
  locally.  The backward's ``dA = dC·Bᵀ`` broadcasts ``B`` blocks along columns and
  reduces ``dA`` blocks along rows; ``dB = Aᵀ·dC`` broadcasts ``A`` blocks along rows and
  reduces ``dB`` blocks along columns: twice the forward's messages.
* ``2.5d`` — Tesseract (Wang et al., "Tesseract: Parallelize the Tensor Parallelism
  Efficiently", 2022), ``tp = d·q²``: ``d`` depth layers of a ``q×q`` mesh.  The input's
  rows are split ``d·q`` ways (each depth layer its ``1/d`` of the tokens); the weight is
  split ``q×q`` and held by every layer.  Each layer runs 2-D SUMMA on its tokens, so the
  ``A`` broadcasts shrink by ``d``; the weight gradients are all-reduced over depth.
* ``3d`` — Bian et al., "Maximizing Parallelism in Distributed Training for Huge Neural
  Networks" (2021), ``tp = q³`` on a ``q×q×q`` cube with axes x, y, z.  A GPU holds an
  ``M/q² × K/q`` input block and a ``K/q × N/q²`` weight block.  A GEMM all-gathers the
  input over one axis (to ``M/q × K/q``), the weight over another (to ``K/q × N/q``),
  multiplies, and reduce-scatters the output over the third (to ``M/q² × N/q``).  The
  backward all-gathers ``dC`` over the output axis and reduce-scatters ``dA`` over the
  input axis and ``dB`` over the weight axis (the gathered ``A`` and ``B`` are kept from
  the forward).  The next GEMM swaps the input and output axes, so layouts chain.

Every GPU computes ``1/tp`` of each GEMM, and of the element-wise work, which these modes
split too.  The weight GEMMs of a layer are the attention's QKV (``h → h + 2·kv``) and
output (``h → h``) projections and the MLP's two (``h → f`` or ``2f`` gated, ``f → h``);
the core attention is local (heads are split over one axis, tokens over the others).
Not modelled: the layer norms' and biases' small reductions, and the overlap of a SUMMA
step's broadcasts with the previous step's GEMM (each step's messages are blocking).

Mesh coordinates inside a TP group of local ranks ``0 … tp-1``: the first axis varies
fastest (2-D: ``t = j + q·i``, so a row is ``q`` consecutive ranks — inside a node when
``q`` ≤ its GPUs; 2.5-D: ``t = j + q·i + q²·k``; 3-D: ``t = x + q·y + q²·z``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from distsim_gpu.simcore.config import check_choice, check_whole
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.specs.models import ModelSpec

__all__ = [
    "TP_MODES",
    "CommStep",
    "Mesh",
    "check_tp_nd",
    "gemm_shapes",
    "layer_comm",
    "mesh_of",
    "received_bytes",
    "weight_replicas",
]

TP_MODES = ("1d", "2d", "2.5d", "3d")
#: Each mode's sub-groups, named by the mesh coordinate that varies along them, fastest
#: first: a 2-D "row" is the q ranks of one row (its column index varies).
AXES = {"2d": ("row", "col"), "2.5d": ("row", "col", "depth"), "3d": ("x", "y", "z")}


@dataclass(frozen=True, slots=True)
class Mesh:
    """The ``tp`` GPUs of a tensor-parallel group as a mesh: ``q`` per side, ``depth``
    layers (2.5-D; 3-D's cube has depth ``q``)."""

    mode: str
    q: int
    depth: int = 1

    @property
    def shape(self) -> tuple[int, ...]:
        """Size of each axis, in :data:`AXES` order."""
        return {"2d": (self.q, self.q), "2.5d": (self.q, self.q, self.depth),
                "3d": (self.q, self.q, self.q)}[self.mode]

    @property
    def tp(self) -> int:
        size = 1
        for n in self.shape:
            size *= n
        return size

    @property
    def token_split(self) -> int:
        """How many ways a GEMM's token rows are split on one GPU (its ``M`` divisor):
        ``q`` (2-D), ``d·q`` (2.5-D), ``q²`` (3-D)."""
        return {"2d": self.q, "2.5d": self.depth * self.q, "3d": self.q * self.q}[self.mode]

    def groups(self, axis: str, root: int = 0) -> tuple[tuple[int, ...], ...]:
        """The sub-groups along ``axis`` (local ranks), one per position of the other
        axes; each starts at its member at position ``root`` and goes round in order
        (a broadcast's or reduce's root comes first, the ring order stays)."""
        return _groups(self.shape, AXES[self.mode].index(axis), root)


@cache
def _groups(shape: tuple[int, ...], axis: int, root: int) -> tuple[tuple[int, ...], ...]:
    strides = [1]
    for n in shape[:-1]:
        strides.append(strides[-1] * n)
    size = shape[axis]
    out = []
    for base in _bases(shape, strides, axis):
        members = [base + p * strides[axis] for p in range(size)]
        out.append(tuple(members[(root + n) % size] for n in range(size)))
    return tuple(out)


def _bases(shape: tuple[int, ...], strides: list[int], axis: int) -> Iterator[int]:
    """Local ranks at position 0 of ``axis``: every combination of the other axes."""
    bases = [0]
    for a, n in enumerate(shape):
        if a != axis:
            bases = [b + p * strides[a] for b in bases for p in range(n)]
    return iter(sorted(bases))


def mesh_of(mode: str, tp: int, depth: int = 1, *, source: str | None = None) -> Mesh | None:
    """The mesh of ``tp_mode`` ``mode`` over ``tp`` GPUs (None for 1-D); a clear error when
    ``tp`` is not ``q²`` (2-D, q ≥ 2), ``d·q²`` (2.5-D, with ``tp_depth`` d) or ``q³``
    (3-D, q ≥ 2)."""
    mode = check_choice(mode, TP_MODES, key="parallelism.tp_mode", source=source,
                        what="tensor-parallel mode")
    check_whole(depth, key="parallelism.tp_depth", source=source)
    if mode != "2.5d" and depth != 1:
        raise ConfigError(f"tp_depth {depth} needs tp_mode: 2.5d",
                          key="parallelism.tp_depth", source=source)
    if mode == "1d":
        return None
    power = 3 if mode == "3d" else 2
    side = 0 if tp % depth else round((tp // depth) ** (1 / power))
    if side < 2 or depth * side ** power != tp:
        shape = {"2d": "q²", "2.5d": f"d·q² with d = tp_depth = {depth}", "3d": "q³"}[mode]
        examples = {"2d": "4, 9, 16, 64", "2.5d": f"{4 * depth}, {9 * depth}, {16 * depth}",
                    "3d": "8, 27, 64"}[mode]
        raise ConfigError(f"tp = {tp} is not {shape} for a whole q >= 2",
                          key="parallelism.tp", source=source,
                          hint=f"tp_mode {mode} arranges the tensor-parallel GPUs as a "
                          f"mesh: choose tp among {examples}, or tp_mode: 1d")
    return Mesh(mode, side, depth if mode == "2.5d" else 1)


def check_tp_nd(parallel: Any, *, micro_batch: int, heads: int, kv_heads: int,
                experts: int, source: str | None = None) -> Mesh | None:
    """Validate ``parallelism.tp_mode`` against the rest of the strategy; returns the mesh.

    Not modelled with a 2-D/2.5-D/3-D mesh (each a :class:`ConfigError`): sequence
    parallelism (the modes split the sequence already), context and expert parallelism,
    MoE models, and ZeRO-3/FSDP (their per-layer gathers are sized for 1-D shards).
    """
    mesh = mesh_of(parallel.tp_mode, parallel.tp, parallel.tp_depth, source=source)
    if mesh is None:
        return None
    mode = mesh.mode
    for on, what, hint in (
            (parallel.sequence_parallel, "sequence_parallel",
             f"tp_mode {mode} splits the activations already: set sequence_parallel: false"),
            (parallel.cp > 1, "cp", "use cp: 1"),
            (parallel.ep > 1 or experts > 1, "ep",
             "MoE layers are modelled with 1-D tensor parallelism only"),
            (parallel.zero == 3 or parallel.fsdp, "zero",
             "use zero <= 2 (ZeRO-3/FSDP gathers are sized for 1-D shards)")):
        if on:
            raise ConfigError(f"tp_mode {mode} with this {what} setting is not modelled",
                              key=f"parallelism.{what}", source=source, hint=hint)
    if micro_batch % mesh.token_split:
        raise ConfigError(
            f"micro_batch {micro_batch} does not split {mesh.token_split} ways over the "
            f"token rows of the tp_mode {mode} mesh", key="training.micro_batch",
            source=source, hint=f"use a multiple of {mesh.token_split}: whole sequences stay "
            "on a GPU so that attention needs no extra exchange")
    for name, count in (("attention heads", heads), ("key/value heads", kv_heads)):
        if count % mesh.q:
            raise ConfigError(f"{count} {name} do not split over q = {mesh.q}",
                              key="parallelism.tp", source=source,
                              hint=f"tp_mode {mode} splits the heads over one side of the "
                              "mesh: q must divide them")
    return mesh


def weight_replicas(mesh: Mesh | None) -> int:
    """Copies of each weight block in a TP group: ``d`` in 2.5-D (every depth layer holds
    the ``q×q`` blocks), else 1 — so a GPU holds ``weight_replicas / tp`` of the weights."""
    return mesh.depth if mesh is not None and mesh.mode == "2.5d" else 1


@dataclass(frozen=True, slots=True)
class CommStep:
    """One collective of a layer's plan: ``op`` on every sub-group along ``axis`` at
    once (its ``root`` first for broadcast/reduce), ``size_bytes`` in nccl-tests' sense
    (the message; the full buffer for all_gather/reduce_scatter), ``what`` it moves."""

    op: str
    axis: str
    size_bytes: float
    root: int
    what: str


def gemm_shapes(model: ModelSpec) -> dict[str, tuple[tuple[int, int], ...]]:
    """``(K, N)`` of each weight GEMM of a block: attention (QKV, output projection),
    mlp (FC1, FC2)."""
    if model.mla is not None:
        raise ConfigError("tp_mode 2d/2.5d/3d with multi-head latent attention is not "
                          "modelled", key="model.mla", hint="use tp_mode: 1d")
    h, f = model.hidden, model.ffn_hidden
    return {"attention": ((h, h + 2 * model.kv_dim), (h, h)),
            "mlp": ((h, f * (2 if model.gated_mlp else 1)), (f, h))}


def layer_comm(mesh: Mesh, model: ModelSpec, *, tokens: int, element_bytes: int,
               ) -> dict[tuple[str, str], tuple[CommStep, ...]]:
    """Each (pass ``fwd``/``bwd``, block ``attention``/``mlp``)'s collectives, in order,
    for ``tokens`` (micro-batch × sequence) rows."""
    plans: dict[tuple[str, str], tuple[CommStep, ...]] = {}
    for block, shapes in gemm_shapes(model).items():
        for pass_ in ("fwd", "bwd"):
            steps: list[CommStep] = []
            gemms = list(enumerate(shapes))
            for index, (k, n) in (reversed(gemms) if pass_ == "bwd" else gemms):
                steps.extend(_gemm_steps(mesh, pass_, index, tokens, k, n, element_bytes))
            plans[(pass_, block)] = tuple(steps)
    return plans


def _gemm_steps(mesh: Mesh, pass_: str, index: int, m: int, k: int, n: int,
                e: int) -> list[CommStep]:
    if mesh.mode == "3d":
        return _cube_steps(mesh, pass_, index, m, k, n, e)
    q = mesh.q
    a_block = e * m * k / (mesh.token_split * q)  # M/q × K/q (2.5-D: M/(d·q) × K/q)
    b_block = e * k * n / (q * q)
    steps: list[CommStep] = []
    for step in range(q):
        if pass_ == "fwd":
            steps += [CommStep("broadcast", "row", a_block, step, "A"),
                      CommStep("broadcast", "col", b_block, step, "B")]
        else:  # dA = dC·Bᵀ, then dB = Aᵀ·dC
            steps += [CommStep("broadcast", "col", b_block, step, "B"),
                      CommStep("reduce", "row", a_block, step, "dA"),
                      CommStep("broadcast", "row", a_block, step, "A"),
                      CommStep("reduce", "col", b_block, step, "dB")]
    if pass_ == "bwd" and mesh.mode == "2.5d" and mesh.depth > 1:
        steps.append(CommStep("all_reduce", "depth", b_block, 0, "dB"))
    return steps


def _cube_steps(mesh: Mesh, pass_: str, index: int, m: int, k: int, n: int,
                e: int) -> list[CommStep]:
    """3-D: the input on x and output on z, swapped on every other GEMM; weights on y."""
    q2 = mesh.q * mesh.q
    a_in, w_in, out = ("x", "y", "z") if index % 2 == 0 else ("z", "y", "x")
    a_bytes, b_bytes, c_bytes = e * m * k / q2, e * k * n / q2, e * m * n / q2
    if pass_ == "fwd":
        return [CommStep("all_gather", a_in, a_bytes, 0, "A"),
                CommStep("all_gather", w_in, b_bytes, 0, "B"),
                CommStep("reduce_scatter", out, c_bytes, 0, "C")]
    return [CommStep("all_gather", out, c_bytes, 0, "dC"),
            CommStep("reduce_scatter", a_in, a_bytes, 0, "dA"),
            CommStep("reduce_scatter", w_in, b_bytes, 0, "dB")]


def received_bytes(step: CommStep, group_size: int) -> float:
    """Bytes one non-root GPU of a sub-group receives in ``step`` (all_gather: the
    others' shares; reduce_scatter: the others' parts of its share, as a ring moves them;
    broadcast and reduce: the message; all_reduce: a ring's ``2(n-1)/n`` of it)."""
    n = group_size
    if step.op in ("all_gather", "reduce_scatter"):
        return step.size_bytes * (n - 1) / n
    if step.op == "all_reduce":
        return 2 * step.size_bytes * (n - 1) / n
    return step.size_bytes
