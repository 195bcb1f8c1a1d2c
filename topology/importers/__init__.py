"""Topology importers: the files a machine's own tools write, read as a distsim cluster.

* ``nvidia-smi topo -m`` printouts (:mod:`.nvidia_smi`) and NCCL's topology dump
  (``NCCL_TOPO_DUMP_FILE``, :mod:`.nccl_xml`) describe one node: read into a
  :class:`NodeLayout`, written as a cluster file by :mod:`.writer`;
* ``ibnetdiscover`` output (:mod:`.ibnetdiscover`) describes the InfiniBand fabric: its
  switches, HCAs and cables, joined to a node shape per host.

``distsim topology import`` is the command; :func:`read_node_dump` tells the two node
formats apart by their content.
"""

from __future__ import annotations

import os

from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.simcore.fileio import read_input_text
from distsim_gpu.topology.importers.layout import NodeLayout
from distsim_gpu.topology.importers.nccl_xml import looks_like_nccl_xml, parse_nccl_xml
from distsim_gpu.topology.importers.nvidia_smi import looks_like_topo_matrix, parse_topo_matrix
from distsim_gpu.topology.importers.writer import cluster_spec, cluster_yaml

__all__ = ["NodeLayout", "cluster_spec", "cluster_yaml", "read_node_dump", "read_text"]


def read_text(path: str | os.PathLike[str]) -> str:
    """A dump's text, read by the one bounded reader of input files (a ParseError naming
    the file if it is missing, not a regular file, too large or not UTF-8)."""
    return read_input_text(path, "topology dump", error=ParseError)


def read_node_dump(path: str | os.PathLike[str]) -> NodeLayout:
    """One node's layout from ``nvidia-smi topo -m`` output or an NCCL topology XML."""
    name = os.fspath(path)
    text = read_text(name)
    if looks_like_nccl_xml(text):
        return parse_nccl_xml(text, source=name)
    if looks_like_topo_matrix(text):
        return parse_topo_matrix(text, source=name)
    raise ParseError("not a topology dump distsim reads", source=name,
                     hint="nvidia-smi topo -m output, an NCCL_TOPO_DUMP_FILE XML, or "
                          "ibnetdiscover output (with --node)")
