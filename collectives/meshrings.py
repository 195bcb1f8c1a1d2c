"""Rings over a mesh node: GPUs cabled to each other directly, with no NVSwitch between them.

In a mesh (the DGX-1's NVLink hybrid cube-mesh, the MI300X platform's xGMI full mesh) a
ring is only as fast as the links its hops cross, so NCCL builds rings whose every hop is a
direct link — a Hamiltonian cycle of the link graph — and opens as many as the links carry
(``src/graph/search.cc``: the search looks for channels at one bandwidth, each channel
taking that bandwidth from every link it crosses, and keeps the set that moves the most).
At the bandwidth of one link that is a packing of directed Hamiltonian cycles in which a
GPU pair cabled with ``c`` links is crossed by at most ``c`` rings in each direction (``c``
counted in the group's narrowest direct link, the figure NCCL's search starts from; a group
whose only link is doubled runs one ring at twice the width, which moves the same bytes):

* MI300X, 8 GPUs, one xGMI link per pair: the 56 directed links split into 7 rings
  (a complete directed graph on 8 vertices decomposes into Hamiltonian cycles; Tillson,
  1980), so a ring all-reduce runs at 7 links' bandwidth — the whole 448 GB/s a GPU has;
* DGX-1, 6 NVLinks per GPU: the doubled pairs form one Hamiltonian cycle and the single
  ones another ("three interwoven rings"), so 6 rings, 150 GB/s per GPU;
* quad GH200, 4 GPUs, 6 NVLinks per pair: at a whole pair's width only 2 rings fit (the
  complete digraph on 4 vertices has no Hamiltonian decomposition), so, as NCCL's search
  goes on at lower speeds, the pair is split in two units and 6 rings use every link.
  Where packing at one unit leaves links idle, half units are tried and kept if they
  move more bytes.

The search is NCCL's in shape: depth first, rings one after another, backtracking across
rings, preferring the widest link and then the next GPU in order, and bounded by a step
budget as NCCL's search is by a time-out; it stops at the first packing that uses every
link a GPU has.  Where no ring of direct links exists (two GPUs of the cube-mesh that are
not cabled, a group that the mesh does not close into a cycle) the caller falls back to
the rank-order ring, whose hops the topology routes through an intermediate GPU.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache

from distsim_gpu.topology import Topology

__all__ = ["MAX_MESH_RINGS", "mesh_path", "mesh_rings"]

# NCCL's search looks for at most MAXCHANNELS/2 = 16 channels (it may duplicate them later,
# which adds no link bandwidth).
MAX_MESH_RINGS = 16
# Search steps before settling for the best packing found, as NCCL's search time-out does.
_SEARCH_BUDGET = 1 << 16

# Link units between each ordered pair of a group's positions (0 = not cabled).
Units = tuple[tuple[int, ...], ...]


def _link_units(topo: Topology, gpus: Sequence[str]) -> Units | None:
    """Per ordered pair of ``gpus``, how many links of the group's narrowest link width
    join them directly (a doubled NVLink counts 2); None if no two of them are cabled."""
    position = {g: i for i, g in enumerate(gpus)}
    widths = [[0.0] * len(gpus) for _ in gpus]
    for i, gpu in enumerate(gpus):
        for peer, bandwidth in topo.gpu_peers(gpu):
            if peer in position:
                widths[i][position[peer]] = bandwidth
    positive = [w for row in widths for w in row if w > 0]
    if not positive:
        return None
    unit = min(positive)
    # A small tolerance: 50e9 / 25e9 is 2 exactly, but an overridden figure may not be.
    return tuple(tuple(int(w / unit + 1e-9) for w in row) for row in widths)


def mesh_rings(topo: Topology, gpus: Sequence[str]) -> list[tuple[str, ...]]:
    """The rings NCCL would run over the direct links among ``gpus`` (each ring a tuple of
    the GPUs in ring order, starting at ``gpus[0]``); empty if the group is not a mesh or
    its links close no ring through every GPU."""
    if len(gpus) < 2 or not topo.gpu_peers(gpus[0]):
        return []
    units = _link_units(topo, gpus)
    if units is None:
        return []
    rings = _pack_rings(units)
    if len(rings) < _ring_bound(units):
        # Links left idle: NCCL's search goes on at lower speeds down to about half the
        # first one (search.cc keeps trying while the next speed is > 0.49 of the found
        # one's), so two rings may share a link unit.  The complete digraph on 4 or 6 GPUs
        # has no decomposition into Hamiltonian cycles (Tillson), its double has: a quad
        # GH200 (6 NVLinks per pair) runs 6 rings at half a pair's width, not 2 at a whole.
        halves = _pack_rings(tuple(tuple(2 * u for u in row) for row in units))
        if len(halves) > 2 * len(rings):
            rings = halves
    return [tuple(gpus[i] for i in ring) for ring in rings]


def _ring_bound(units: Units) -> int:
    """The most rings the units could carry: no GPU sends or receives on more."""
    n = len(units)
    return min(min(sum(row) for row in units),
               min(sum(units[a][b] for a in range(n)) for b in range(n)), MAX_MESH_RINGS)


def mesh_path(topo: Topology, gpus: Sequence[str], entry: str,
              exit_gpu: str) -> list[str] | None:
    """A path from ``entry`` to ``exit_gpu`` through every GPU of ``gpus`` over direct
    links (a node's part of a ring that enters and leaves it by the network), widest links
    first; None if the group is not a mesh or no such path exists."""
    if not topo.gpu_peers(entry):
        return None
    units = _link_units(topo, gpus)
    if units is None:
        return None
    found = _hamiltonian_path(units, gpus.index(entry), gpus.index(exit_gpu))
    return None if found is None else [gpus[i] for i in found]


def _candidates(units: Units, x: int, used: Sequence[bool],
                left: Sequence[Sequence[int]]) -> list[int]:
    """The positions reachable from ``x`` over a link with capacity left, widest first,
    then in ring order after ``x`` (NCCL tries GPU g+1 first)."""
    n = len(units)
    found = [y for y in range(n) if not used[y] and left[x][y] > 0]
    found.sort(key=lambda y: (-units[x][y], (y - x) % n))
    return found


@lru_cache(maxsize=256)
def _pack_rings(units: Units) -> tuple[tuple[int, ...], ...]:
    """The most directed Hamiltonian cycles (over positions 0..n-1, each from 0) that the
    link units carry, each unit crossed by at most one ring; the search budget bounds it."""
    n = len(units)
    left = [list(row) for row in units]
    upper = _ring_bound(units)
    best: list[tuple[int, ...]] = []
    rings: list[tuple[int, ...]] = []
    steps = [0]

    def cycles() -> Iterator[tuple[int, ...]]:
        path, used = [0], [True] + [False] * (n - 1)

        def extend() -> Iterator[tuple[int, ...]]:
            steps[0] += 1
            if steps[0] > _SEARCH_BUDGET:
                return
            x = path[-1]
            if len(path) == n:
                if left[x][0] > 0:
                    yield tuple(path)
                return
            for y in _candidates(units, x, used, left):
                path.append(y)
                used[y] = True
                yield from extend()
                path.pop()
                used[y] = False

        yield from extend()

    def search() -> bool:
        nonlocal best
        if len(rings) > len(best):
            best = list(rings)
        if len(best) >= upper or steps[0] > _SEARCH_BUDGET:
            return True
        for ring in cycles():
            hops = list(zip(ring, ring[1:] + ring[:1]))
            for a, b in hops:
                left[a][b] -= 1
            rings.append(ring)
            done = search()
            rings.pop()
            for a, b in hops:
                left[a][b] += 1
            if done:
                return True
        return False

    search()
    return tuple(best)


@lru_cache(maxsize=256)
def _hamiltonian_path(units: Units, entry: int, exit_pos: int) -> tuple[int, ...] | None:
    """A path ``entry`` -> ``exit_pos`` through every position over links, or None."""
    n = len(units)
    if n == 1:
        return (entry,)
    path, used = [entry], [False] * n
    used[entry] = True
    steps = 0

    def extend() -> bool:
        nonlocal steps
        steps += 1
        if steps > _SEARCH_BUDGET:
            return False
        x = path[-1]
        if len(path) == n - 1:
            return units[x][exit_pos] > 0
        for y in _candidates(units, x, used, units):
            if y == exit_pos:
                continue
            path.append(y)
            used[y] = True
            if extend():
                return True
            path.pop()
            used[y] = False
        return False

    if entry == exit_pos or not extend():
        return None
    return (*path, exit_pos)
