"""The SMs overlapped NCCL collectives take from compute (workloads.iteration.nccl_sms):
while ``k`` calls are in flight on a rank group's own communication streams, compute runs
on ``compute_sms − k·nccl_sms`` SMs, at that share of its pace, and speeds up as each
ends; nothing changes where no collective overlaps compute."""

from __future__ import annotations

from dataclasses import replace

import pytest
import simpy
from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.params import NCCL_SMS, comm_params_from_mapping
from distsim_gpu.scenarios.disruptions import spec_of
from distsim_gpu.scenarios.run_notes import nccl_sm_notes
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute.roofline import RooflineCosts
from distsim_gpu.workloads.iteration.nccl_sms import NcclSmShare, nccl_streams
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Fused
from distsim_gpu.workloads.iteration.simulator import simulate_iteration
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.strategy.parallel import ParallelConfig

H100 = RooflineCosts(get_gpu("h100-sxm"))
DP = ParallelConfig(tp=2, dp=4)


class _Call:
    """A stream's last call: ``done`` triggered once it has ended."""

    def __init__(self, env: simpy.Environment, ended: bool) -> None:
        self.done = env.event()
        if ended:
            self.done.succeed()


def test_the_default_is_nccls_figure_for_a_dgx_node():
    assert NCCL_SMS == 16
    assert CommParams().nccl_sms == 16
    assert CommParams().to_dict()["nccl_sms"] == 16
    assert CommParams().ideal().nccl_sms == 0


@pytest.mark.parametrize("held", [0, 1, 2])
def test_compute_takes_the_sms_ratio_longer_per_call_in_flight(held):
    """132 SMs of an H100, 16 a collective: 132/116 with one call in flight, 132/100
    with two; a call that has ended holds nothing."""
    env = simpy.Environment()
    share = NcclSmShare(H100, CommParams(), DP)
    streams = {"reduce": _Call(env, ended=held < 1), "gather": _Call(env, ended=held < 2)}
    assert share.scale(streams) == pytest.approx(132 / (132 - 16 * held))
    assert share.scale({}) == 1.0


def _op(*steps_s: tuple[str, float]) -> Fused:
    """A fused op of (``"compute"`` or ``"tp"``, seconds) steps."""
    steps = tuple(Compute(s, "c") if kind == "compute" else
                  Collective("all_reduce", 1.0, "tp", group="tp") for kind, s in steps_s)
    compute = sum(s for kind, s in steps_s if kind == "compute")
    return Fused(steps, tuple(s for _, s in steps_s), compute,
                 sum(s for _, s in steps_s) - compute)


def _run(share: NcclSmShare, ends_s: list[float], op: Fused) -> tuple[float, float]:
    """Run ``op`` beside calls ending at ``ends_s``: (its end, its compute seconds)."""
    env = simpy.Environment()
    calls = {name: _Call(env, ended=False) for name in ("reduce", "gather")[:len(ends_s)]}
    for call, end in zip(calls.values(), ends_s, strict=True):
        env.process(_end(env, call, end))
    out = {}

    def body():
        out["computed"] = yield from share.run(env, calls, op)
        out["end"] = env.now  # (an abandoned timeout may still fire after it)
    env.process(body())
    env.run()
    return out["end"], out["computed"]


def _end(env, call, at_s):
    yield env.timeout(at_s)
    call.done.succeed()


def test_compute_speeds_up_as_each_call_ends():
    """1 s of compute with a reduction ending at 0.5 s: 0.5 s at 116/132 of its pace, the
    rest at full pace; with a gather besides ending at 0.2 s, 0.2 s at 100/132 first.
    Closed-form collectives after it run at their own time."""
    share = NcclSmShare(H100, CommParams(), DP)
    one = 0.5 + (1 - 0.5 * 116 / 132)
    assert _run(share, [0.5], _op(("compute", 1.0))) == pytest.approx((one, one))
    done_by_02 = 0.2 * 100 / 132
    done_by_05 = done_by_02 + 0.3 * 116 / 132
    two = 0.5 + (1 - done_by_05)
    assert _run(share, [0.5, 0.2], _op(("compute", 1.0))) == pytest.approx((two, two))
    assert _run(share, [0.5], _op(("compute", 1.0), ("tp", 0.25))) == pytest.approx(
        (one + 0.25, one))
    # A call outlasting the compute slows all of it.
    assert _run(share, [5.0], _op(("compute", 1.0))) == pytest.approx((132 / 116,) * 2)


def test_a_fused_ops_steps_run_in_order():
    """Compute 1 s, a closed-form collective 1 s, compute 1 s, beside a reduction ending
    at 2.5 s: the first compute slowed throughout, the collective not, the second compute
    slowed until 2.5 s — as the same steps run as separate ops would be."""
    share = NcclSmShare(H100, CommParams(), DP)
    end, computed = _run(share, [2.5], _op(("compute", 1.0), ("tp", 1.0), ("compute", 1.0)))
    first = 132 / 116
    second_slow = 2.5 - (first + 1.0)
    second = second_slow + (1.0 - second_slow * 116 / 132)
    assert end == pytest.approx(first + 1.0 + second)
    assert computed == pytest.approx(first + second)


def test_deepeps_sms_are_taken_once_and_its_all_to_alls_hold_none_here():
    """DeepEP's kernels hold ``compute.comm_sms`` for the whole run (the roofline's
    compute SMs); an overlapped NCCL collective takes its SMs from what is left."""
    deepep = RooflineCosts(get_gpu("h100-sxm"), comm_sms=20)
    par = ParallelConfig(tp=1, dp=8, ep=8, fb_overlap=True, schedule="1f1b")
    nccl = CommParams()
    assert nccl_streams(par, nccl) == ("gather", "reduce", "ep")
    assert nccl_streams(par, replace(nccl, all_to_all="deepep")) == ("gather", "reduce")
    share = NcclSmShare(deepep, replace(nccl, all_to_all="deepep"), par)
    env = simpy.Environment()
    assert share.scale({"ep": _Call(env, ended=False)}) == 1.0
    assert share.scale({"reduce": _Call(env, ended=False)}) == pytest.approx(112 / 96)


@pytest.mark.parametrize(("parallel", "streams"), [
    (ParallelConfig(tp=8), ()),                              # one replica: nothing overlaps
    (ParallelConfig(tp=2, dp=2), ("gather", "reduce")),
    (ParallelConfig(tp=2, cp=2), ("gather", "reduce")),      # reduced over dp·cp
    (ParallelConfig(tp=2, dp=2, ep=2), ("gather", "reduce")),  # all-to-alls block
])
def test_which_streams_hold_sms(parallel, streams):
    assert nccl_streams(parallel, CommParams()) == streams


def test_without_a_roofline_or_with_none_held_compute_is_not_scaled():
    env = simpy.Environment()
    busy = {"reduce": _Call(env, ended=False)}
    assert NcclSmShare(object(), CommParams(), DP).scale(busy) == 1.0  # a bare cost table
    assert NcclSmShare(H100, replace(CommParams(), nccl_sms=0), DP).scale(busy) == 1.0


def test_sms_past_the_gpus_are_refused():
    with pytest.raises(ConfigError, match=r"communication\.nccl_sms") as error:
        NcclSmShare(H100, replace(CommParams(), nccl_sms=66), DP)
    assert "at most 65" in str(error.value)


@pytest.mark.parametrize("value", [-1, 1.5, "many", 2000])
def test_a_bad_figure_is_refused_by_name(value):
    with pytest.raises(ConfigError, match=r"communication\.nccl_sms"):
        comm_params_from_mapping({"nccl_sms": value}, prefix="communication")


def _dp_scenario(tmp_path, tiny, write_scenario, nccl_sms: int | None, dp: int = 4):
    data = tiny(parallelism={"tp": 2, "pp": 1, "dp": dp, "zero": 3},
                training={"global_batch": 4 * dp}, compute={"gpu": "h100-sxm"},
                communication={} if nccl_sms is None else {"nccl_sms": nccl_sms})
    data["cluster"] = {"preset": "switch", "gpus": 2 * dp}
    return load_scenario(write_scenario(tmp_path / f"s{nccl_sms}-{dp}.yaml", data))


def test_overlapped_compute_slows_within_the_sms_bounds(tmp_path, tiny, write_scenario):
    """ZeRO-3 gathers and reduce-scatters every layer beside compute: each GPU's compute
    grows, by at most 132/100 (both streams busy) and the iteration with it; the bytes
    moved do not change."""
    spec = spec_of(_dp_scenario(tmp_path, tiny, write_scenario, 16))
    alone, shared = (simulate_iteration(replace(spec, comm=replace(spec.comm, nccl_sms=n)))
                     for n in (0, 16))
    for before, after in zip(alone.per_gpu, shared.per_gpu, strict=True):
        assert before.compute_s < after.compute_s <= before.compute_s * 132 / 100 + 1e-12
    assert shared.iteration_time_s > alone.iteration_time_s
    moved = [sum(s.bytes for s in r.simulation.network.link_stats().values())
             for r in (alone, shared)]
    assert moved[0] == pytest.approx(moved[1], rel=1e-9)


def test_a_run_says_it_took_the_default_figure(tmp_path, tiny, write_scenario):
    """Noted where the scenario left the key out; the default's value written by hand is
    a choice, not an assumption."""
    keys = {n: [note.key for note in run_scenario(
        _dp_scenario(tmp_path, tiny, write_scenario, n)).notes] for n in (None, 16, 8)}
    assert "communication.nccl_sms" in keys[None]
    assert NCCL_SMS == 16 and "communication.nccl_sms" not in keys[16]
    assert "communication.nccl_sms" not in keys[8]


def test_one_replica_runs_as_it_did(tmp_path, tiny, write_scenario):
    """No data parallelism: no collective overlaps compute, the figure changes nothing."""
    spec = spec_of(_dp_scenario(tmp_path, tiny, write_scenario, 16, dp=1))
    times = [simulate_iteration(replace(spec, comm=replace(spec.comm, nccl_sms=n)))
             .iteration_time_s for n in (0, 16)]
    assert times[0] == times[1]


def test_the_note_says_when_a_cost_table_leaves_compute_unslowed():
    [note] = nccl_sm_notes(CommParams(), object(), DP)
    assert note.kind == "unmodelled" and note.key == "communication.nccl_sms"
    [note] = nccl_sm_notes(CommParams(), H100, DP)
    assert note.kind == "defaulted" and "116 of 132" in note.message
    assert nccl_sm_notes(comm_params_from_mapping({"nccl_sms": 8}), H100, DP) == []
    assert nccl_sm_notes(comm_params_from_mapping({"nccl_sms": 16}), H100, DP) == []
    assert nccl_sm_notes(CommParams(), H100, ParallelConfig(tp=8)) == []
