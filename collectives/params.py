"""Communication parameters: link efficiency, NCCL protocols and latencies, with sources.

A collective's time on an uncontended network is ``latency + wire_bytes / rate`` where
the rate comes from the links' capacities.  Three things separate that from the raw
datasheet numbers, and each is a documented, overridable parameter here:

* **link efficiency** — the fraction of a link's nominal rate that payload achieves
  (packet headers, flow control, encoding not already in the nominal figure);
* **protocol** — NCCL moves data with one of three protocols: ``ll`` (8-byte stores
  carrying 4 bytes of data and a 4-byte flag: half the bandwidth, lowest latency),
  ``ll128`` (128-byte lines with an 8-byte flag: 120/128 of the bandwidth) and
  ``simple`` (bulk copies with fences: full bandwidth, highest latency);
* **latency** — a per-call base latency plus a per-hop latency by transport (NVLink,
  PCIe, network), from NCCL's own tuning model (``src/graph/tuning.cc``, tables
  ``baseLat`` and ``hwLat``, NCCL 2.1x-2.2x), to which the physical route latency of the
  topology is added.  The algorithms NCCL uses at scale have their own rows there:
  ``nvls`` and ``nvls_tree`` (NVLink SHARP: 25 us per NVLink pass, 18 / 20.9 us per
  network hop, no base latency) and ``collnet`` (InfiniBand SHARP, CollNet Direct: 3.7 us
  inside the node, 31 us through the network).  They run the Simple protocol only, as does
  ``pat`` (NCCL >= 2.23's reduce-scatter/all-gather with one GPU per node: 8 us base,
  4 us per log step; see :mod:`collectives.pat`).
* **peer latency** — an all-to-all is ``n-1`` sends and receives grouped into one call;
  NCCL's proxy thread posts each network peer's operations one after another, so every
  network peer beyond the first adds NCCL's network post overhead (``tuning.cc``
  ``getNetOverhead``: 1 us on x86 Intel hosts, 2 us on AMD, three times that for
  Simple — the figure NCCL's ring model charges per network step).  Peers over NVLink or
  PCIe are driven by the kernel itself, concurrently over the channels (up to 8 peers per
  channel, ``NCCL_MAX_DEV_WORK_P2P_PER_BATCH``), so they add nothing.
* **NVLS efficiency** — NVLink SHARP's multimem loads and stores reach 85 % of the
  NVLink rate on Hopper (``tuning.cc`` ``nvlsEfficiency``; 74 % on Blackwell).
* **PXN** — on by default, as in NCCL >= 2.12 (``NCCL_PXN_DISABLE=0``): a send to a
  GPU of another node whose NIC is on another rail goes over NVLink to the local GPU on
  that rail first (see :mod:`collectives.pxn`); a ring's hop out of a node leaves the
  same way when the leaving GPU is not beside its channel's NIC (:mod:`collectives.rails`).

* **chunk** — pipelined algorithms (tree, the broadcast/reduce chain) move a stream in
  chunks of one FIFO step: NCCL's default buffers (``NCCL_BUFFSIZE`` 4 MiB for Simple,
  ``NCCL_STEPS`` = 8 slots) give 512 KiB for Simple, 32 KiB of data per LL step (512 KiB
  of 16-byte lines, half flags) and ~576 KiB for LL128 (8 slots of 120·640 8-byte
  elements, 120/128 data).  The pipeline's fill costs one chunk per extra hop.

With every efficiency 1, every protocol latency and chunk 0 and ``protocol: simple`` the
result is the pure bandwidth formula plus the topology's link latencies.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from distsim_gpu.collectives.ep_kernels import (
    DEEPEP_FIT_ARCHITECTURE,
    DEEPEP_NVLINK_EFFICIENCY,
    DEEPEP_SM_BYTES_PER_S,
    DEEPEP_SM_TOKEN_S,
    EP_KERNELS,
)
from distsim_gpu.simcore.config import (
    check_bool,
    check_choice,
    check_keys,
    check_mapping,
    check_number,
    check_whole,
)
from distsim_gpu.simcore.units import parse_bandwidth, parse_latency, parse_size

__all__ = [
    "ALGORITHMS",
    "ALLTOALL_MODES",
    "DEEPEP_FIT_ARCHITECTURE",
    "DEEPEP_NVLINK_EFFICIENCY",
    "DEEPEP_SM_BYTES_PER_S",
    "DEEPEP_SM_TOKEN_S",
    "FIDELITIES",
    "NVLINK_EFFICIENCY_BY_ARCHITECTURE",
    "NVLS_EFFICIENCY_BY_ARCHITECTURE",
    "PROTOCOLS",
    "CommParams",
    "comm_params_for",
    "comm_params_from_mapping",
]

ALGORITHMS = ("auto", "ring", "tree", "nvls", "nvls_tree", "collnet", "pat", "pxn")
FIDELITIES = ("coflow", "step")
PROTOCOLS = ("auto", "ll", "ll128", "simple")

# Payload fraction of each protocol's wire bytes (NCCL protocol definitions: LL packs 4 B of
# data with a 4 B flag in every 8 B store; LL128 puts an 8 B flag in each 128 B line).
_PROTOCOL_EFFICIENCY = {"ll": 0.5, "ll128": 120.0 / 128.0, "simple": 1.0}

# Data bytes per FIFO step of each protocol with NCCL's default buffer sizes (see above).
_CHUNK_BYTES = {"ll": 32 * 2.0**10, "ll128": 576 * 2.0**10, "simple": 512 * 2.0**10}

# NCCL tuning.cc (2.1x-2.2x): baseLat per algorithm and hwLat per transport, microseconds.
# NVLS, NVLS-tree and CollNet run the Simple protocol only, and have no base latency.
_BASE_LATENCY_US = {
    "ring": {"ll": 6.6, "ll128": 14.0, "simple": 8.4},
    "tree": {"ll": 6.8, "ll128": 14.0, "simple": 8.4},
    "nvls": {"simple": 0.0},
    "nvls_tree": {"simple": 0.0},
    "collnet": {"simple": 0.0},
    # PAT (NCCL >= 2.23, reduce-scatter and all-gather, one GPU per node): Simple only.
    "pat": {"simple": 8.0},
}
_HOP_LATENCY_US = {
    "ring": {
        "nvlink": {"ll": 0.6, "ll128": 1.9, "simple": 3.4},
        "pcie": {"ll": 1.0, "ll128": 2.5, "simple": 5.7},
        "net": {"ll": 2.7, "ll128": 4.0, "simple": 14.0},
    },
    "tree": {
        "nvlink": {"ll": 0.6, "ll128": 1.25, "simple": 4.0},
        "pcie": {"ll": 1.0, "ll128": 1.9, "simple": 6.0},
        "net": {"ll": 5.0, "ll128": 8.5, "simple": 14.0},
    },
    "nvls": {"nvlink": {"simple": 25.0}, "net": {"simple": 18.0}},
    "nvls_tree": {"nvlink": {"simple": 25.0}, "net": {"simple": 20.9}},
    # CollNet Direct's row (CollNet Chain's is 2.8 / 30 us).
    "collnet": {"nvlink": {"simple": 3.7}, "pcie": {"simple": 3.7}, "net": {"simple": 31.0}},
    # PAT's log steps: with one GPU per node NCCL charges the tree's network latency
    # (14 us) divided by 3.5 per step, log2(nodes) steps (collectives/pat.py).
    "pat": {"net": {"simple": 14.0 / 3.5}},
}
# Per network peer of an all-to-all beyond the first (NCCL's network post overhead on x86
# Intel; 1 us, x3 for Simple); NVLink and PCIe peers run concurrently in the kernel.
_PEER_LATENCY_US = {
    "nvlink": {"ll": 0.0, "ll128": 0.0, "simple": 0.0},
    "pcie": {"ll": 0.0, "ll128": 0.0, "simple": 0.0},
    "net": {"ll": 1.0, "ll128": 1.0, "simple": 3.0},
}
# NVLink SHARP's achieved fraction of the NVLink rate on Hopper (tuning.cc nvlsEfficiency).
_NVLS_EFFICIENCY = 0.85
#: NVLink SHARP's fraction by GPU generation, NCCL's own ``nvlsEfficiency`` (tuning.cc,
#: 2.19-2.27, indexed by compute capability): Blackwell's multimem loads and stores reach
#: less of NVLink 5's doubled rate than Hopper's of NVLink 4's.  Others take Hopper's.
NVLS_EFFICIENCY_BY_ARCHITECTURE = {"hopper": 0.85, "blackwell": 0.74}
#: The SMs one NCCL collective's kernel holds while it runs, one CTA a channel, none shared
#: with compute: "on DGX with 8 NICs and a top speed of 190 GB/s, [NCCL] would use 16
#: SMs", 2 on a PCIe system with one NIC (the NCCL maintainers, NVIDIA/nccl#689; an FSDP
#: all-gather on H100 has been seen launching 24).  Overlapped compute runs on the rest
#: (:mod:`workloads.iteration.nccl_sms`).
NCCL_SMS = 16

# Achievable payload fraction of each link kind's nominal one-direction rate.
#  nvlink  0.82: NVLink packets carry a 16 B header per <=256 B payload plus data-link
#                flits; NVIDIA quotes ~370 GB/s ring bus bandwidth on H100's 450 GB/s NVLink4
#                (0.82); other generations by NVLINK_EFFICIENCY_BY_ARCHITECTURE below.
#  pcie    0.86: a 256 B max-payload TLP carries ~24 B of TLP/DLL framing plus DLLP
#                acknowledgements and flow-control credits (PCIe base spec; ~86 %).
#  network 0.96: InfiniBand/RoCE at 4096 B MTU loses ~1-2 % to LRH/BTH/RETH/CRC headers and
#                ~2 % to acknowledgements; ib_write_bw reaches ~24 GB/s on HDR (25 GB/s line).
#  cpu     0.70: inter-socket links (xGMI/UPI) carry coherence traffic besides payload.
_LINK_EFFICIENCY = {"nvlink": 0.82, "pcie": 0.86, "network": 0.96, "cpu": 0.70}
#: NVLink's payload fraction by the GPU generation that carries it, where it is known to
#: differ from the H100 figure above: NVIDIA quotes ~235 GB/s ring bus bandwidth on A100's
#: 300 GB/s NVLink3 (0.78); the corpus's A100 logs plateau at 232 GB/s (Meta gcm fixture,
#: 1 GiB) and vTrain's A100 all-reduce table calibrates to 0.77.  Other generations (and a
#: GPU without one) take the default.
NVLINK_EFFICIENCY_BY_ARCHITECTURE = {"ampere": 0.78, "hopper": 0.82}


def _default_link_efficiency(architecture: str = "") -> dict[str, float]:
    nvlink = NVLINK_EFFICIENCY_BY_ARCHITECTURE.get(architecture, _LINK_EFFICIENCY["nvlink"])
    return {**_LINK_EFFICIENCY, "nvlink": nvlink}


def _default_protocol_efficiency() -> dict[str, float]:
    return dict(_PROTOCOL_EFFICIENCY)


def _default_chunk_bytes() -> dict[str, float]:
    return dict(_CHUNK_BYTES)


def _default_base_latency() -> dict[str, dict[str, float]]:
    return {a: {p: us * 1e-6 for p, us in row.items()} for a, row in _BASE_LATENCY_US.items()}


def _default_hop_latency() -> dict[str, dict[str, dict[str, float]]]:
    return {
        a: {t: {p: us * 1e-6 for p, us in row.items()} for t, row in by_transport.items()}
        for a, by_transport in _HOP_LATENCY_US.items()
    }


def _default_peer_latency() -> dict[str, dict[str, float]]:
    return {t: {p: us * 1e-6 for p, us in row.items()} for t, row in _PEER_LATENCY_US.items()}


@dataclass(frozen=True, slots=True)
class CommParams:
    """How collectives run: algorithm, protocol, fidelity, efficiencies and latencies (SI).

    ``base_latency_s[algorithm][protocol]`` is paid once per call;
    ``hop_latency_s[algorithm][transport][protocol]`` once per algorithm step over a hop of
    that transport (``nvlink``, ``pcie``, ``net``); ``peer_latency_s[transport][protocol]``
    once per all-to-all peer beyond the first over that transport.  ``nvls_efficiency`` is
    the fraction of the NVLink rate NVLink SHARP reaches; ``pxn`` whether sends to another
    rail go through the local GPU on that rail (NCCL's PXN, on by default), a ring's hop
    out of a node included (:mod:`collectives.rails`).
    ``all_to_all``: ``flat`` (NCCL's), ``hierarchical`` (HetuMoE's), ``deepep``
    (DeepEP's two-hop dispatch and combine, :mod:`collectives.deepep`) or ``auto`` (the
    faster of flat and hierarchical, :mod:`collectives.alltoall_hier`);
    ``alltoall_weights``: per rank of an all-to-all group of that many ranks, the share it
    receives relative to uniform (a MoE router's skew, :mod:`workloads.specs.moe_routing`;
    empty: uniform).  ``deepep_max_nodes``: DeepEP's node-limited routing, the nodes a
    token may reach (0: no limit); ``ep_kernels``: which kernels run it, ``deepep`` or
    ``hybridep`` (:mod:`collectives.ep_kernels`: the defaults of the next three);
    ``deepep_nvlink_efficiency``: the fraction of NVLink's payload rate
    (``link_efficiency``) the kernels' copies reach; ``moe_experts`` and
    ``moe_top_k``: the router a ``deepep`` exchange deduplicates tokens for (set from the
    model; 0: not a MoE run); ``deepep_sms``: the SMs DeepEP's kernels run on
    (``compute.comm_sms``; 0: not counted), each taking ``deepep_sm_token_s`` a token plus
    its bytes at ``deepep_sm_bytes_per_s`` (:meth:`deepep_sm_rate`; 0: unbound by them);
    ``moe_tokens``: the tokens a rank routes in one exchange (set from the model and
    batch; 0: unknown, and the per-token time is not counted) and ``moe_hidden`` their
    width.  ``nccl_sms``: the SMs an NCCL collective overlapped with compute takes from it
    while it runs (0: none, :mod:`workloads.iteration.nccl_sms`).
    """

    algorithm: str = "auto"
    protocol: str = "auto"
    fidelity: str = "coflow"
    max_channels: int = 0  # 0 = as many as the topology offers (one per NIC rail)
    link_efficiency: dict[str, float] = field(default_factory=_default_link_efficiency)
    protocol_efficiency: dict[str, float] = field(default_factory=_default_protocol_efficiency)
    chunk_bytes: dict[str, float] = field(default_factory=_default_chunk_bytes)
    base_latency_s: dict[str, dict[str, float]] = field(default_factory=_default_base_latency)
    hop_latency_s: dict[str, dict[str, dict[str, float]]] = field(
        default_factory=_default_hop_latency)
    peer_latency_s: dict[str, dict[str, float]] = field(default_factory=_default_peer_latency)
    nvls_efficiency: float = _NVLS_EFFICIENCY
    pxn: bool = True
    all_to_all: str = "flat"
    alltoall_weights: tuple[float, ...] = ()
    deepep_max_nodes: int = 0
    ep_kernels: str = "deepep"
    deepep_nvlink_efficiency: float = DEEPEP_NVLINK_EFFICIENCY
    moe_experts: int = 0
    moe_top_k: int = 0
    deepep_sms: int = 0
    deepep_sm_bytes_per_s: float = DEEPEP_SM_BYTES_PER_S
    deepep_sm_token_s: float = DEEPEP_SM_TOKEN_S
    moe_tokens: int = 0
    moe_hidden: int = 0
    nccl_sms: int = NCCL_SMS
    #: Whether ``link_efficiency["nvlink"]`` was set by the user (or by :meth:`ideal`); if
    #: not, it is the GPU generation's figure, resolved by :meth:`on_architecture` once the
    #: cluster is known.  Not compared: it says where a figure came from, not what it is.
    nvlink_efficiency_given: bool = field(default=False, compare=False, repr=False)
    #: The same for ``nvls_efficiency`` (:data:`NVLS_EFFICIENCY_BY_ARCHITECTURE`).
    nvls_efficiency_given: bool = field(default=False, compare=False, repr=False)
    #: Whether ``nccl_sms`` was set (a run notes the default figure only when it was not:
    #: 16 written by hand is a choice, not an assumption).
    nccl_sms_given: bool = field(default=False, compare=False, repr=False)
    #: The GPU generation whose NVLink efficiency was not given and has no figure of its
    #: own (:data:`NVLINK_EFFICIENCY_BY_ARCHITECTURE`), so took H100's; "" otherwise.  A
    #: run says so in a note: Blackwell's NVLink 5 has no measured ring figure here.
    nvlink_efficiency_borrowed_by: str = field(default="", compare=False, repr=False)

    def on_architecture(self, architecture: str) -> CommParams:
        """These parameters on GPUs of ``architecture`` (``ampere``, ``hopper``, …; "" for
        unknown): NVLink's and NVLink SHARP's efficiencies become that generation's
        (:data:`NVLINK_EFFICIENCY_BY_ARCHITECTURE`, :data:`NVLS_EFFICIENCY_BY_ARCHITECTURE`)
        unless they were given."""
        params = self
        if not self.nvls_efficiency_given:
            params = replace(params, nvls_efficiency=NVLS_EFFICIENCY_BY_ARCHITECTURE.get(
                architecture, _NVLS_EFFICIENCY))
        if self.nvlink_efficiency_given:
            return (replace(params, nvlink_efficiency_borrowed_by="")
                    if params.nvlink_efficiency_borrowed_by else params)
        nvlink = _default_link_efficiency(architecture)["nvlink"]
        borrowed = "" if architecture in NVLINK_EFFICIENCY_BY_ARCHITECTURE else architecture
        return replace(params, link_efficiency={**self.link_efficiency, "nvlink": nvlink},
                       nvlink_efficiency_borrowed_by=borrowed)

    def deepep_sm_rate(self, token_bytes: float) -> float:
        """Bytes per second one SM of DeepEP's kernels moves of tokens of ``token_bytes``
        (0: not known, the byte rate alone)."""
        if token_bytes <= 0 or not self.deepep_sm_token_s or not self.deepep_sm_bytes_per_s:
            return self.deepep_sm_bytes_per_s
        return token_bytes / (self.deepep_sm_token_s
                              + token_bytes / self.deepep_sm_bytes_per_s)

    def token_bytes(self, size_bytes: float) -> float:
        """Bytes of one token of a MoE exchange of ``size_bytes`` (``top_k`` copies of
        ``moe_tokens`` tokens); 0 when the tokens are not known."""
        copies = self.moe_tokens * self.moe_top_k
        return size_bytes / copies if copies > 0 else 0.0

    def efficiency_of(self, link_kind: str) -> float:
        """Payload fraction of a link kind (1.0 for kinds not listed)."""
        return self.link_efficiency.get(link_kind, 1.0)

    def ideal(self) -> CommParams:
        """These parameters with every efficiency 1, every protocol latency 0 and DeepEP's
        copies unbound by their SMs."""
        return replace(
            self,
            link_efficiency={k: 1.0 for k in self.link_efficiency},
            protocol_efficiency={k: 1.0 for k in self.protocol_efficiency},
            nvls_efficiency=1.0,
            deepep_nvlink_efficiency=1.0,
            deepep_sms=0,
            nccl_sms=0,
            peer_latency_s={t: dict.fromkeys(r, 0.0) for t, r in self.peer_latency_s.items()},
            chunk_bytes=dict.fromkeys(self.chunk_bytes, 0.0),
            base_latency_s={a: dict.fromkeys(r, 0.0) for a, r in self.base_latency_s.items()},
            hop_latency_s={a: {t: dict.fromkeys(r, 0.0) for t, r in by_t.items()}
                           for a, by_t in self.hop_latency_s.items()},
            nvlink_efficiency_given=True,
            nvls_efficiency_given=True,
            nvlink_efficiency_borrowed_by="",
        )

    def given_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` without the figures a run notes as assumed where the scenario
        did not give them (an NVLink efficiency borrowed from H100, NCCL's SMs): a
        scenario written from it resolves to the same figures, and its run says again
        that it assumed them (the notes give the figures)."""
        data = self.to_dict()
        if self.nvlink_efficiency_borrowed_by:
            del data["link_efficiency"]["nvlink"]
        if not self.nccl_sms_given:
            del data["nccl_sms"]
        return data

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready resolved form (times in seconds)."""
        return {
            "algorithm": self.algorithm,
            "protocol": self.protocol,
            "fidelity": self.fidelity,
            "max_channels": self.max_channels,
            "link_efficiency": dict(self.link_efficiency),
            "protocol_efficiency": dict(self.protocol_efficiency),
            "chunk_bytes": dict(self.chunk_bytes),
            "base_latency_s": {a: dict(r) for a, r in self.base_latency_s.items()},
            "hop_latency_s": {a: {t: dict(r) for t, r in b.items()}
                              for a, b in self.hop_latency_s.items()},
            "peer_latency_s": {t: dict(r) for t, r in self.peer_latency_s.items()},
            "nvls_efficiency": self.nvls_efficiency,
            "pxn": self.pxn,
            "all_to_all": self.all_to_all,
            "nccl_sms": self.nccl_sms,
            **({"deepep_max_nodes": self.deepep_max_nodes} if self.deepep_max_nodes else {}),
            **({"ep_kernels": self.ep_kernels,
                "deepep_nvlink_efficiency": self.deepep_nvlink_efficiency,
                "deepep_sms": self.deepep_sms,
                "deepep_sm_bytes_per_s": self.deepep_sm_bytes_per_s,
                "deepep_sm_token_s": self.deepep_sm_token_s}
               if self.all_to_all == "deepep" else {}),
        }


_COMM_KEYS = ("algorithm", "protocol", "fidelity", "max_channels", "link_efficiency",
              "protocol_efficiency", "chunk_bytes", "base_latency", "hop_latency",
              "peer_latency", "nvls_efficiency", "pxn", "all_to_all", "deepep_max_nodes",
              "ep_kernels", "deepep_nvlink_efficiency", "deepep_sm_rate", "deepep_sm_token_time",
              "nccl_sms")
#: How an all-to-all runs (collectives.alltoall_hier, collectives.deepep).
ALLTOALL_MODES = ("flat", "hierarchical", "deepep", "auto")
_CHOICES = {"algorithm": ALGORITHMS, "protocol": PROTOCOLS, "fidelity": FIDELITIES,
            "all_to_all": ALLTOALL_MODES, "ep_kernels": tuple(EP_KERNELS)}
# What the keys of each per-name table are, for "unknown <what>" errors.
_TABLE_KEYS = {"link_efficiency": "link kind", "protocol_efficiency": "protocol",
               "chunk_bytes": "protocol"}

T = TypeVar("T")


def _fraction(value: Any, key: str, source: str | None) -> float:
    return check_number(value, key=key, above=True, maximum=1, source=source)


def _size(value: Any, key: str, source: str | None) -> float:
    # A chunk is what NCCL moves per pipeline step: 0 bytes would never move (ideal() sets
    # 0 internally to mean "no pipeline fill"; a user's 0 is a mistake, not that).
    return parse_size(value, key=key, source=source, allow_zero=False)


def _duration(value: Any, key: str, source: str | None) -> float:
    return parse_latency(value, key=key, source=source)  # a bare 7 is refused, not 7 s


def comm_params_for(architecture: str = "") -> CommParams:
    """The default parameters for GPUs of ``architecture`` (``ampere``, ``hopper``, …; ""
    for unknown): only NVLink's efficiency depends on it
    (:data:`NVLINK_EFFICIENCY_BY_ARCHITECTURE`)."""
    return CommParams().on_architecture(architecture)


def comm_params_from_mapping(data: Mapping[str, Any] | None, *, source: str | None = None,
                             prefix: str = "comm", architecture: str = "") -> CommParams:
    """Build :class:`CommParams` from a YAML-style mapping, validating every key.

    Keys: ``algorithm``, ``protocol``, ``fidelity``, ``max_channels``,
    ``link_efficiency: {nvlink, pcie, network, cpu}``,
    ``protocol_efficiency: {ll, ll128, simple}``, ``chunk_bytes: {ll, ll128, simple}``,
    ``base_latency: {ring|tree: {ll|ll128|simple: "8.4 us"}}``,
    ``hop_latency: {ring|tree|nvls|…: {nvlink|pcie|net: {ll|ll128|simple: "3.4 us"}}}``,
    ``peer_latency: {nvlink|pcie|net: {ll|ll128|simple: "1 us"}}``,
    ``nvls_efficiency`` (a fraction), ``pxn`` (true or false),
    ``all_to_all`` (flat, hierarchical, deepep or auto), ``deepep_max_nodes`` (a whole
    number of nodes, DeepEP's node-limited routing), ``ep_kernels`` (deepep or hybridep:
    whose figures the next three default to), ``deepep_nvlink_efficiency`` (a
    fraction), ``deepep_sm_rate`` (a bandwidth, what one SM of the kernels streams; 0:
    the copies are not bound by their SMs)
    and ``deepep_sm_token_time`` (a duration, what it spends on each token besides),
    ``nccl_sms`` (the SMs an NCCL collective holds, 0 to 1024).  Keys not given take the
    defaults for GPUs of ``architecture`` (:func:`comm_params_for`); with ``architecture``
    "" NVLink's efficiency stays the generation's until :meth:`CommParams.on_architecture` meets the
    cluster, so a mapping is parsed once, before the cluster is built.
    """
    return _parsed_comm(data, source, prefix).on_architecture(architecture)


def _parsed_comm(data: Mapping[str, Any] | None, source: str | None,
                 prefix: str) -> CommParams:
    params = CommParams()
    if not data:
        return params
    data = check_mapping(data, key=prefix, source=source)
    check_keys(data, _COMM_KEYS, prefix=prefix, source=source)
    changes: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}.{key}"
        if key in _CHOICES:
            changes[key] = check_choice(value, _CHOICES[key], key=path, source=source,
                                        fold_case=True)
        elif key in ("max_channels", "nccl_sms"):
            changes[key] = check_whole(value, key=path, minimum=0, maximum=1024,
                                       source=source)
            if key == "nccl_sms":
                changes["nccl_sms_given"] = True
        elif key == "deepep_max_nodes":
            changes[key] = check_whole(value, key=path, minimum=1, maximum=2**16,
                                       source=source)
        elif key in ("nvls_efficiency", "deepep_nvlink_efficiency"):
            changes[key] = _fraction(value, path, source)
            if key == "nvls_efficiency":
                changes["nvls_efficiency_given"] = True
        elif key == "deepep_sm_rate":
            changes["deepep_sm_bytes_per_s"] = parse_bandwidth(value, key=path, source=source,
                                                               allow_zero=True)
        elif key == "deepep_sm_token_time":
            changes["deepep_sm_token_s"] = parse_latency(value, key=path, source=source)
        elif key == "pxn":
            changes[key] = check_bool(value, key=path, source=source)
        elif key == "peer_latency":
            changes["peer_latency_s"] = _latency_tables(params.peer_latency_s, value, path,
                                                        source, ("transport",))
        elif key in _TABLE_KEYS:
            read = _size if key == "chunk_bytes" else _fraction
            changes[key] = _table(getattr(params, key), value, path, source, _TABLE_KEYS[key],
                                  read)
            if key == "link_efficiency" and "nvlink" in value:
                changes["nvlink_efficiency_given"] = True
        elif key == "base_latency":
            changes["base_latency_s"] = _latency_tables(params.base_latency_s, value, path,
                                                        source, ("algorithm",))
        else:  # hop_latency
            changes["hop_latency_s"] = _latency_tables(params.hop_latency_s, value, path,
                                                       source, ("algorithm", "transport"))
    if "ep_kernels" in changes:  # the family's figures, where the mapping gives none
        kernels = EP_KERNELS[changes["ep_kernels"]]
        for name, value in (("deepep_nvlink_efficiency", kernels.nvlink_efficiency),
                            ("deepep_sm_bytes_per_s", kernels.sm_bytes_per_s),
                            ("deepep_sm_token_s", kernels.sm_token_s)):
            changes.setdefault(name, value)
    return replace(params, **changes)


def _table(defaults: Mapping[str, T], values: Any, path: str, source: str | None,
           what: str, read: Callable[[Any, str, str | None], T]) -> dict[str, T]:
    """``defaults`` with the entries ``values`` (at ``path``) gives, each read by ``read``."""
    given = check_mapping(values, key=path, source=source)
    check_keys(given, defaults, prefix=path, source=source, what=what)
    return {**defaults, **{name: read(v, f"{path}.{name}", source) for name, v in given.items()}}


def _latency_tables(defaults: Mapping[str, Any], values: Any, path: str, source: str | None,
                    levels: tuple[str, ...]) -> dict[str, Any]:
    """Latency rows by protocol, nested under ``levels`` (what each level's keys name:
    algorithm, then transport): a copy of ``defaults`` with the given rows merged in."""
    if not levels:
        return _table(defaults, values, path, source, "protocol", _duration)
    given = check_mapping(values, key=path, source=source)
    check_keys(given, defaults, prefix=path, source=source, what=levels[0])
    merged = copy.deepcopy(dict(defaults))
    for name, row in given.items():
        merged[name] = _latency_tables(defaults[name], row, f"{path}.{name}", source,
                                       levels[1:])
    return merged
