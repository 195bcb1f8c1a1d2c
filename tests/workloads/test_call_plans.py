"""CallPlans and the communicator's per-(plan, size) coflow: caches of pure functions whose
keys must tell apart calls that differ in one thing only (size, GPUs, lanes)."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import Communicator
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.iteration.call_plans import CallPlans
from distsim_gpu.workloads.iteration.timeline import RankGroup


@pytest.fixture
def comm() -> Communicator:
    topology = build_cluster({"preset": "dgx-h100", "nodes": 2})
    return Communicator(Simulation(), topology)


def _groups(comm: Communicator) -> tuple[RankGroup, RankGroup]:
    gpus = comm.topology.gpus
    return RankGroup(0, 0, tuple(gpus[:8]), 1.0), RankGroup(0, 1, tuple(gpus[8:16]), 1.0)


def test_tp_plan_is_choose_per_group_op_and_size(comm):
    calls = CallPlans(comm, comm.sim.env)
    first, second = _groups(comm)
    small, large = 4096.0, 1 << 30
    for group in (first, second):
        for op in ("all_reduce", "all_gather"):
            for size in (small, large):
                assert calls.tp_plan(group, op, size) is comm.choose(op, list(group.gpus),
                                                                      size)
    # Differing only in size (NCCL's protocol choice), in op, or in the GPUs.
    assert calls.tp_plan(first, "all_reduce", small) is not calls.tp_plan(
        first, "all_reduce", large)
    assert (calls.tp_plan(first, "all_reduce", small).protocol
            != calls.tp_plan(first, "all_reduce", large).protocol)
    assert calls.tp_plan(first, "all_reduce", large) is not calls.tp_plan(
        first, "all_gather", large)
    assert calls.tp_plan(first, "all_reduce", large) is not calls.tp_plan(
        second, "all_reduce", large)


def _links_of(comm: Communicator, gpus: list[str]) -> set[object]:
    return comm.plan_links(comm.choose("all_reduce", gpus, 1e6))


def test_run_lanes_runs_each_lists_own_plans(comm):
    # Two lanes lists alike but for their GPUs: each call's flows cross its own lanes'
    # links (a cache keyed by anything coarser than the list would reuse the first's).
    calls = CallPlans(comm, comm.sim.env)
    gpus = comm.topology.gpus
    net = comm.sim.network
    for lanes in ([list(gpus[:4]), list(gpus[4:8])], [list(gpus[8:12]), list(gpus[12:16])]):
        for _ in range(2):  # the second call of a list uses its cached plans
            before = {link: net.link_bytes(link) for link in net.link_ids}
            calls.run_lanes(lanes, "all_reduce", 1e6, "dp")
            comm.sim.run()
            crossed = {link for link in net.link_ids if net.link_bytes(link) > before[link]}
            assert crossed == _links_of(comm, lanes[0]) | _links_of(comm, lanes[1])
    first_only = _links_of(comm, list(gpus[:4]))
    assert not first_only & _links_of(comm, list(gpus[8:12]))


def test_run_lanes_waits_for_the_first_lanes_only(comm):
    calls = CallPlans(comm, comm.sim.env)
    gpus = comm.topology.gpus
    lanes = [list(gpus[:8]), list(gpus[8:16])]
    assert calls.run_lanes(lanes, "all_reduce", 1e6, "dp", wait=1).env is comm.sim.env
    comm.sim.run()


def test_layer_group_lanes_are_built_once_per_stage_and_shards(comm):
    calls = CallPlans(comm, comm.sim.env)
    row = list(_groups(comm))
    lanes = calls.layer_group_lanes(row, 0, ((0, 1), (2, 3)))
    assert lanes == [[row[0].gpus[0], row[0].gpus[1], row[1].gpus[0], row[1].gpus[1]],
                     [row[0].gpus[2], row[0].gpus[3], row[1].gpus[2], row[1].gpus[3]]]
    assert calls.layer_group_lanes(row, 0, ((0, 1), (2, 3))) is lanes
    assert calls.layer_group_lanes(row, 1, ((0, 1), (2, 3))) is not lanes
    assert calls.layer_group_lanes(row, 0, ((0, 2), (1, 3))) != lanes


def test_a_coflow_call_is_priced_per_size(comm):
    # Communicator._coflow_call caches (links, wire bytes, latency) per plan and size:
    # the same plan at two sizes must start flows of each size's bytes.
    plan = comm.choose("all_reduce", comm.topology.gpus[:8], 1e6)
    for size in (1e6, 3e6, 1e6):
        done = comm.run_plan(plan, size, fidelity="coflow")
        comm.sim.run()
        flow = done.value
        assert flow.size_bytes == plan.coflow_bytes(size)
        assert flow.latency_s == plan.latency_s


def _calls_run(start: bool) -> tuple[int, list[tuple[object, ...]], list[float]]:
    """Calls of three sizes on overlapping GPUs, two of them at once and one later, run by
    ``Communicator.collective`` or, with the plan in hand, ``Communicator.start``: the
    events processed, the records and when each waiting process resumed."""
    topology = build_cluster({"preset": "dgx-h100", "nodes": 2})
    sim = Simulation()
    comm = Communicator(sim, topology)
    gpus = topology.gpus
    resumed: list[float] = []
    records = []

    def caller(group, size, delay):
        yield sim.env.timeout(delay)
        call = (comm.start(comm.choose("all_reduce", group, size), size, tag="tp") if start
                else comm.collective("all_reduce", group, size, tag="tp"))
        record = yield call
        records.append(tuple(getattr(record, f) for f in record.__slots__))
        resumed.append(sim.env.now)

    for group, size, delay in ((gpus[:8], 1e6, 0.0), (gpus[4:12], 3e8, 0.0),
                               (gpus[:16], 4096.0, 1e-5)):
        sim.env.process(caller(list(group), size, delay))
    sim.run()
    return sim.env.events_processed, records, resumed


def test_start_runs_a_coflow_as_collective_does_event_for_event():
    assert _calls_run(start=True) == _calls_run(start=False)
