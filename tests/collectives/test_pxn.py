"""PXN: a send to another node's GPU on another rail goes over NVLink to the local GPU on
that rail first, so on a rail-optimized fabric no byte leaves its rail's leaf."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.collectives.pxn import pxn_proxy
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import build_cluster

H100_NIC = 50e9  # NDR 400 Gb/s per direction


@pytest.fixture(scope="module")
def rails4() -> object:
    return build_cluster({"preset": "dgx-h100", "nodes": 4, "fabric": "rail-optimized"})


def ideal(**changes) -> CommParams:
    from dataclasses import replace
    return replace(CommParams(protocol="simple").ideal(), **changes)


def loads(plan, size: float) -> dict[tuple[str, str], float]:
    per_stream, links = plan.coflow(size)
    return {link: per_stream * streams for link, streams in links.items()}


def test_the_proxy_is_the_local_gpu_on_the_receivers_rail(rails4):
    assert pxn_proxy(rails4, "n0.gpu0", "n1.gpu3") == "n0.gpu3"
    assert pxn_proxy(rails4, "n0.gpu3", "n1.gpu3") is None  # same rail: straight
    assert pxn_proxy(rails4, "n0.gpu0", "n0.gpu3") is None  # same node: NVLink
    pcie = build_cluster({"preset": "pcie-8gpu", "nodes": 2, "nic": {"count": 2}})
    assert pxn_proxy(pcie, "n0.gpu0", "n1.gpu4") is None  # no NVLink to forward over


def test_pxn_all_to_all_keeps_every_byte_on_its_rail(rails4):
    """Closed forms with n = 32 GPUs, 8 per node on 4 nodes, S per rank: every NVLink port
    carries (ppn-1)·nodes·S/n (local peers and forwarding), every NIC ppn·(nodes-1)·S/n;
    spines and the sockets' link carry nothing; the NICs bind the time."""
    comm = Communicator(Simulation(), rails4, ideal())
    gpus = list(rails4.gpus)
    plan = comm.choose("alltoall", gpus, 1e9)
    assert plan.algorithm == "pxn"
    size = 32e9
    load = loads(plan, size)
    ppn, nodes, n = 8, 4, 32
    for link, bytes_ in load.items():
        ends = [rails4.device(x) for x in link]
        assert not any(d.name.startswith("spine") for d in ends), link
        assert rails4.link(*link).kind != "cpu", link
        if ends[0].kind == "gpu" and ends[1].kind == "nvswitch":
            assert bytes_ == pytest.approx((ppn - 1) * nodes * size / n)
        if ends[0].kind == "nic" and ends[1].kind == "switch":
            assert bytes_ == pytest.approx(ppn * (nodes - 1) * size / n)
    into_fabric = [a for a, b in load if rails4.device(b).kind == "switch"]
    assert len(into_fabric) == nodes * 8
    sim = Simulation()
    comm = Communicator(sim, rails4, ideal())
    process = comm.collective("alltoall", gpus, size)
    sim.run()
    expected = ppn * (nodes - 1) * size / n / H100_NIC + plan.latency_s
    assert process.value.duration_s == pytest.approx(expected, rel=1e-9)


def test_a_send_across_rails_forwards_over_nvlink(rails4):
    sim = Simulation()
    comm = Communicator(sim, rails4, ideal())
    plan = comm.choose("p2p", ["n0.gpu0"], 1e6, algorithm="auto", peer="n1.gpu3")
    assert plan.algorithm == "pxn"
    links = set(plan.steps[0].link_streams)
    assert {("n0.gpu0", "n0.nvswitch"), ("n0.nvswitch", "n0.gpu3"), ("n0.nic3", "leaf3"),
            ("leaf3", "n1.nic3")} <= links
    process = comm.send("n0.gpu0", "n1.gpu3", 1e6)
    sim.run()
    assert process.value.algorithm == "pxn"
    same_rail = comm.choose("p2p", ["n0.gpu2"], 1e6, algorithm="auto", peer="n1.gpu2")
    assert same_rail.algorithm == "ring"


def test_sendrecv_forwards_only_the_hops_that_change_rail(rails4):
    comm = Communicator(Simulation(), rails4, ideal())
    plan = comm.choose("sendrecv", list(rails4.gpus), 1e9)
    assert plan.algorithm == "pxn"
    load = loads(plan, 1e9)
    # n0.gpu7 -> n1.gpu0 goes over NVLink to n0.gpu0 (which takes nothing else over
    # NVLink: its ring predecessor is n3.gpu7) and leaves through its NIC on rail 0.
    assert load[("n0.gpu7", "n0.nvswitch")] == pytest.approx(1e9)
    assert load[("n0.nvswitch", "n0.gpu0")] == pytest.approx(1e9)
    assert load[("n0.nic0", "leaf0")] == pytest.approx(1e9)
    assert ("n0.nic7", "leaf7") not in load


def test_pxn_off_or_one_node_sends_straight(rails4):
    gpus = list(rails4.gpus)
    off = Communicator(Simulation(), rails4, ideal(pxn=False))
    assert off.candidates("alltoall", gpus) == ("ring",)
    direct = off.choose("alltoall", gpus, 1e9)
    assert direct.algorithm == "ring"
    # Straight sends change rail in the fabric, through a spine: each end posts on its own
    # GPU's NIC, as NCCL's net transport does without PXN (never through a receiving
    # node's PCIe root and sockets, as distsim had sent them).
    crossed = {rails4.link(*link).kind if "spine" not in link[0] + link[1] else "spine"
               for link in direct.steps[0].link_streams}
    assert "spine" in crossed and "cpu" not in crossed
    on = Communicator(Simulation(), rails4, ideal())
    assert on.candidates("alltoall", gpus[:8]) == ("ring",)
    assert on.candidates("alltoall", gpus) == ("pxn",)


@pytest.mark.parametrize("op", ["p2p", "sendrecv"])
def test_a_send_between_rails_without_pxn_lands_on_the_receivers_own_nic(rails4, op):
    """n0.gpu0 -> n1.gpu3 without PXN: out of n0.nic0, across a spine, into n1.nic3 beside
    the receiver, as NCCL connects the sender's NIC to the receiver's."""
    comm = Communicator(Simulation(), rails4, ideal(pxn=False))
    group = ["n0.gpu0", "n1.gpu3"]
    plan = (comm.plan("p2p", group[:1], algorithm="ring", protocol="simple", peer=group[1])
            if op == "p2p" else comm.plan("sendrecv", group, algorithm="ring",
                                          protocol="simple"))
    links = set(plan.steps[0].link_streams)
    assert ("n0.pcie0", "n0.nic0") in links and ("n1.nic3", "n1.pcie3") in links
    assert any("spine" in a + b for a, b in links)
    assert not any(rails4.link(a, b).kind == "cpu" for a, b in links)
