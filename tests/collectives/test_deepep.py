"""DeepEP's dispatch and combine (communication.all_to_all: deepep): the reach of a token
in closed form, one InfiniBand copy per destination node on the sender's rail, the bytes
each link carries, clear errors, and an iteration that runs it."""

from __future__ import annotations

from dataclasses import replace
from math import comb

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.alltoall_hier import link_bytes
from distsim_gpu.collectives.deepep import deepep_plans, reach, sm_bound_factor
from distsim_gpu.collectives.params import comm_params_from_mapping
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.traffic import alltoall_bytes, dispatch_bytes, dispatches_fp8
from distsim_gpu.workloads.specs.models import get_model
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from hypothesis import given, settings
from hypothesis import strategies as st

TOPOLOGY = build_cluster({"preset": "dgx-h100", "nodes": 4, "fabric": "rail-optimized"})
GPUS = list(TOPOLOGY.gpus)  # 32 GPUs, 8 per node
PARAMS = replace(CommParams(), all_to_all="deepep", moe_experts=256, moe_top_k=8)


def test_reach_is_the_uniform_routers_closed_form() -> None:
    p_gpu, p_node = reach(ranks=32, nodes=4, experts=256, top_k=8)
    assert p_gpu == pytest.approx(1 - comb(248, 8) / comb(256, 8))
    assert p_node == pytest.approx(1 - comb(192, 8) / comb(256, 8))
    # Node-limited to 2 of 4 nodes: a node half the time, a GPU of it among 128 experts.
    p_gpu, p_node = reach(ranks=32, nodes=4, experts=256, top_k=8, max_nodes=2)
    assert p_node == 0.5
    assert p_gpu == pytest.approx(0.5 * (1 - comb(120, 8) / comb(128, 8)))
    # One node: every token reaches it.
    assert reach(ranks=8, nodes=1, experts=256, top_k=8)[1] == 1.0


def _plan(params: CommParams = PARAMS):
    (plan,) = deepep_plans(TOPOLOGY, GPUS, params, "simple")
    return plan


def test_one_infiniband_copy_per_destination_node_on_the_senders_rail() -> None:
    """n0.gpu3's NIC carries (N−1)·P(node) tokens' bytes, S being top-k copies of T
    tokens: S/k·(N−1)·P(node); its InfiniBand peers are the gpu3 of each other node."""
    size = 8 * 1000.0  # bytes per GPU: top-8 copies of 1,000 one-byte tokens
    _p_gpu, p_node = reach(ranks=32, nodes=4, experts=256, top_k=8)
    carried = link_bytes(_plan(), size)
    wire = size / _plan().protocol_efficiency
    # Every NIC of node 0 carries its own GPU's copies only (each on its rail's leaf).
    uplinks = {link: b for link, b in carried.items() if str(link[0]).startswith("n0.nic")
               and str(link[1]).startswith("leaf")}
    assert sorted(uplinks) == [(f"n0.nic{r}", f"leaf{r}") for r in range(8)]
    for carried_bytes in uplinks.values():
        assert carried_bytes == pytest.approx(wire / 8 * 3 * p_node)


def test_node_limit_one_sends_each_token_to_one_node() -> None:
    size = 8 * 1000.0
    limited = replace(PARAMS, deepep_max_nodes=1)
    carried = link_bytes(_plan(limited), size)
    wire = size / _plan(limited).protocol_efficiency
    nic = ("n0.nic0", "leaf0")
    assert carried[nic] == pytest.approx(wire / 8 * 3 * 0.25)  # a remote node 3/4 of tokens


def test_fewer_bytes_than_top_k_copies() -> None:
    """Deduplicated per node, the busiest NIC moves less than NCCL's all-to-all does."""
    size = 8 * 2**20
    flat = replace(PARAMS, all_to_all="flat")
    from distsim_gpu.collectives.alltoall_hier import alltoall_plans

    (flat_plan,) = alltoall_plans(TOPOLOGY, GPUS, flat, "simple")
    deepep_nic = max(v for k, v in link_bytes(_plan(), size).items() if "nic" in str(k[0]))
    flat_nic = max(v for k, v in link_bytes(flat_plan, size).items() if "nic" in str(k[0]))
    assert deepep_nic < flat_nic


def test_fp8_dispatch_bytes() -> None:
    model = get_model("deepseek-v3")
    parallel = ParallelConfig(ep=64, dp=64)
    fp8 = TrainingConfig(precision="fp8")
    plain = alltoall_bytes(model, parallel, fp8)
    assert dispatch_bytes(model, parallel, fp8, "deepep") == pytest.approx(
        plain * (1 + 4 / 128) / 2)
    assert dispatch_bytes(model, parallel, fp8, "flat") == plain
    assert dispatch_bytes(model, parallel, TrainingConfig(), "deepep") == alltoall_bytes(
        model, parallel, TrainingConfig())
    # Whether the tokens go as FP8 (and the layer casts them before): DeepEP's, FP8 or
    # FP4, and a dispatch at all (ep > 1).
    assert dispatches_fp8("deepep", "fp8", 64) and dispatches_fp8("deepep", "fp4", 2)
    assert not dispatches_fp8("deepep", "fp8", 1)
    assert not dispatches_fp8("flat", "fp8", 64) and not dispatches_fp8("deepep", "bf16", 64)


@pytest.mark.parametrize(("mapping", "message"), [
    ({"all_to_all": "deep-ep"}, r"comm\.all_to_all: .*deepep"),
    ({"deepep_max_nodes": 0}, r"comm\.deepep_max_nodes: must be a whole number >= 1"),
    ({"deepep_max_nodes": 1.5}, r"comm\.deepep_max_nodes: must be a whole number"),
    ({"deepep_nvlink_efficiency": 1.2}, r"comm\.deepep_nvlink_efficiency: .*1"),
    ({"deepep_nvlink_efficiency": 0}, r"comm\.deepep_nvlink_efficiency: .*0"),
])
def test_bad_keys_are_clear_errors(mapping, message) -> None:
    with pytest.raises(ConfigError, match=message):
        comm_params_from_mapping(mapping)


ONE_NODE = build_cluster({"preset": "dgx-h100", "nodes": 1})


@pytest.mark.parametrize("efficiency", [1.0, 0.84, 0.5])
def test_nvlink_copies_hold_their_links_one_over_the_efficiency(efficiency) -> None:
    """On one node with ideal links, a dispatch of S bytes (top-8 copies) puts on each
    GPU's NVLink out-port the (n−1)·P(gpu)·S/k bytes it sends, over ``efficiency`` —
    and at EP 8 that port is the bottleneck: time = latency + those bytes /
    (B·efficiency)."""
    from distsim_gpu.collectives.nccl_tests import run_benchmark

    params = replace(CommParams().ideal(), all_to_all="deepep", moe_experts=256,
                     moe_top_k=8, deepep_nvlink_efficiency=efficiency)
    size = 8 * 2**20
    p_gpu, _ = reach(ranks=8, nodes=1, experts=256, top_k=8)
    sent = size / 8 * p_gpu * 7  # bytes one GPU copies to the 7 others
    (plan,) = deepep_plans(ONE_NODE, list(ONE_NODE.gpus), params, "simple")
    out_port = {k: v for k, v in link_bytes(plan, size).items() if k[0] == "n0.gpu0"}
    assert sum(out_port.values()) == pytest.approx(sent / efficiency)
    (row,) = run_benchmark(ONE_NODE, "alltoall", [size], params=params, dtype="int8")
    nvlink = ONE_NODE.link("n0.gpu0", next(iter(out_port))[1]).bandwidth_bytes_per_s
    transfer_s = row.time_s - plan.latency_s  # the links' own latency, ~0.6 us
    assert transfer_s == pytest.approx(sent / (nvlink * efficiency), rel=1e-6)


B200_NODE = build_cluster({"preset": "dgx-b200", "nodes": 1})


@pytest.mark.parametrize("sms", [0, 8, 16, 30, 50, 64, 132])
@pytest.mark.parametrize("tokens", [0, 4096])
def test_few_sms_bound_the_nvlink_copies(sms, tokens) -> None:
    """On a B200 node (NVLink 900 GB/s a direction) with ideal links, an EP 8 dispatch's
    NVLink copies leave a GPU at min(NVLink, sms · B / (t + B / rate)) for tokens of B
    bytes (the exchange's size over its top_k copies of 4,096 tokens: 2 KiB; with the
    tokens not known the byte rate alone): its out-port bytes over that rate, plus
    latency; unbounded with the SMs not counted (0)."""
    from distsim_gpu.collectives.nccl_tests import run_benchmark

    params = replace(CommParams().ideal(), all_to_all="deepep", moe_experts=64,
                     moe_top_k=8, deepep_sms=sms, moe_tokens=tokens)
    size = 64 * 2**20
    token_bytes = size / (tokens * 8) if tokens else 0.0
    p_gpu, _ = reach(ranks=8, nodes=1, experts=64, top_k=8)
    sent = size / 8 * p_gpu * 7  # bytes one GPU copies to the 7 others
    (plan,) = deepep_plans(B200_NODE, list(B200_NODE.gpus), params, "simple", token_bytes)
    (row,) = run_benchmark(B200_NODE, "alltoall", [size], params=params, dtype="int8")
    port = next(link for link in B200_NODE.links()
                if link.src == "n0.gpu0" and link.kind == "nvlink")
    per_sm = (token_bytes / (0.4e-6 + token_bytes / 38e9)) if tokens else 38e9
    rate = min(port.bandwidth_bytes_per_s, sms * per_sm) if sms else port.bandwidth_bytes_per_s
    assert row.time_s - plan.latency_s == pytest.approx(sent / rate, rel=1e-6)
    assert sm_bound_factor(B200_NODE, params, token_bytes) == pytest.approx(
        port.bandwidth_bytes_per_s / rate)


def test_an_sms_rate_falls_with_the_tokens_size() -> None:
    """Each token costs an SM its time besides its bytes: an FP8 token (7,168 bytes and
    their scales) moves at 0.67 of a BF16 token's byte rate, B200's rows 0.68 (12.5 and
    18.5 GB/s an SM); the bytes' rate bounds it from above."""
    params = CommParams()
    bf16, fp8 = params.deepep_sm_rate(7168 * 2.0), params.deepep_sm_rate(7168 * 1.03125)
    assert bf16 == pytest.approx(18.44e9, rel=1e-3) and fp8 == pytest.approx(12.43e9, rel=1e-3)
    assert fp8 / bf16 == pytest.approx(12.5 / 18.5, rel=0.02)
    assert params.deepep_sm_rate(1e9) < params.deepep_sm_bytes_per_s == \
        params.deepep_sm_rate(0.0)
    assert params.token_bytes(8 * 4096 * 14336.0) == 0.0  # tokens not known
    assert replace(params, moe_tokens=4096, moe_top_k=8).token_bytes(8 * 4096 * 14336.0) == \
        14336.0


@settings(max_examples=20, deadline=None)
@given(fewer=st.integers(1, 132), more=st.integers(1, 132),
       rate_gb_s=st.floats(2.0, 40.0), token_us=st.floats(0.0, 2.0))
def test_more_sms_never_slow_the_exchange(fewer, more, rate_gb_s, token_us) -> None:
    """Across four H100 nodes (NVLink and InfiniBand legs), for any SM rate and time a
    token: more SMs never take longer, no count is faster than the exchange unbounded by
    SMs, and the InfiniBand bytes do not depend on them."""
    from distsim_gpu.collectives.nccl_tests import run_benchmark

    fewer, more = sorted((fewer, more))
    size = 32 * 2**20
    times, nic_bytes = [], []
    for sms in (fewer, more, 0):
        params = replace(PARAMS, deepep_sms=sms, deepep_sm_bytes_per_s=rate_gb_s * 1e9,
                         deepep_sm_token_s=token_us * 1e-6, moe_tokens=1024)
        (row,) = run_benchmark(TOPOLOGY, "alltoall", [size], params=params, dtype="int8")
        times.append(row.time_s)
        nic_bytes.append(link_bytes(_plan(params), size)[("n0.nic0", "leaf0")])
    assert times[0] >= times[1] * (1 - 1e-9) and times[1] >= times[2] * (1 - 1e-9)
    assert nic_bytes[0] == pytest.approx(nic_bytes[2]) == pytest.approx(nic_bytes[1])


def test_sms_that_outpace_nvlink_change_nothing_on_hopper() -> None:
    """DeepEP's 20 SMs move 369 GB/s of DeepSeek-V3's 16-bit tokens (7,168 wide: 18.4 GB/s
    an SM), more than an H100's NVLink gives its copies (450 · 0.82 · 0.84 = 310): the
    plan is the unbounded one; 12 SMs bind."""
    hopper = replace(CommParams().on_architecture("hopper"), all_to_all="deepep",
                     moe_experts=256, moe_top_k=8)
    token = 7168 * 2.0
    assert sm_bound_factor(ONE_NODE, replace(hopper, deepep_sms=20), token) == 1.0
    assert sm_bound_factor(ONE_NODE, replace(hopper, deepep_sms=12), token) == pytest.approx(
        450e9 * 0.82 * 0.84 / (12 * hopper.deepep_sm_rate(token)), rel=1e-3)


def test_the_nvlink_efficiency_leaves_the_infiniband_copies_alone() -> None:
    size = 8 * 1000.0
    slow = replace(PARAMS, deepep_nvlink_efficiency=0.5)
    nic = ("n0.nic0", "leaf0")
    assert link_bytes(_plan(slow), size)[nic] == pytest.approx(link_bytes(_plan(), size)[nic])
    assert comm_params_from_mapping({"all_to_all": "deepep", "deepep_nvlink_efficiency": 0.7}
                                    ).to_dict()["deepep_nvlink_efficiency"] == 0.7
    assert "deepep_nvlink_efficiency" not in CommParams().to_dict()
    with_sms = replace(PARAMS, deepep_sms=4)  # bound: NVLink legs 450·0.82·0.84/72 longer
    assert link_bytes(_plan(with_sms), size)[nic] == pytest.approx(
        link_bytes(_plan(), size)[nic])
    assert with_sms.to_dict()["deepep_sms"] == 4


def test_deepep_without_a_router_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"all_to_all: deepep needs a MoE model's router"):
        _plan(replace(PARAMS, moe_experts=0, moe_top_k=0))
    with pytest.raises(ConfigError, match=r"do not spread evenly"):
        reach(ranks=32, nodes=4, experts=100, top_k=8)


def test_an_iteration_with_deepep_dispatch(write_scenario, tmp_path) -> None:
    """A 16-expert top-4 MoE over 16 GPUs on 2 nodes: DeepEP's once-per-node copies beat
    NCCL's 4 copies per token, so the iteration is faster; same FLOP."""
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    base = {"name": "moe", "cluster": {"preset": "dgx-h100", "nodes": 2,
                                       "fabric": "rail-optimized"},
            "model": {"name": "m", "layers": 2, "hidden": 2048, "heads": 16,
                      "seq_len": 2048, "vocab": 32000, "experts": 16, "top_k": 4},
            "parallelism": {"dp": 16, "ep": 16},
            "training": {"micro_batch": 1, "global_batch": 32},
            "compute": {"gpu": "h100-sxm", "costs": "roofline"}}
    times = {}
    for mode in ("flat", "deepep"):
        path = write_scenario(tmp_path / f"{mode}.yaml",
                              {**base, "communication": {"all_to_all": mode}})
        times[mode] = run_scenario(load_scenario(path)).iteration_time_s
    assert times["deepep"] < times["flat"]


@pytest.mark.parametrize(("mode", "precision", "cast"), [
    ("deepep", "fp8", True), ("flat", "fp8", False), ("deepep", "bf16", False)])
def test_an_fp8_deepep_iteration_casts_its_tokens_before_the_dispatch(
        write_scenario, tmp_path, monkeypatch, mode, precision, cast) -> None:
    """The iteration times its MoE layers with the dispatch-side cast exactly when the
    dispatch sends FP8 (DeepEP's, under FP8), and the operator comparison reads the same."""
    from distsim_gpu.scenarios.fit.validate_operators import scenario_layer_work
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
    from distsim_gpu.workloads.cost.compute import RooflineCosts

    asked = []
    timed = RooflineCosts.layer_time_s
    monkeypatch.setattr(RooflineCosts, "layer_time_s", lambda self, pass_, model, shard: (
        asked.append(shard.deepep and precision == "fp8") or timed(self, pass_, model,
                                                                    shard)))
    path = write_scenario(tmp_path / "moe.yaml", {
        "name": "moe", "cluster": {"preset": "dgx-h100", "nodes": 1},
        "model": {"name": "m", "layers": 2, "hidden": 2048, "heads": 16, "seq_len": 2048,
                  "vocab": 32000, "experts": 16, "top_k": 4},
        "parallelism": {"dp": 8, "ep": 8},
        "training": {"micro_batch": 1, "global_batch": 8, "precision": precision},
        "communication": {"all_to_all": mode},
        "compute": {"gpu": "h100-sxm", "costs": "roofline"}})
    scenario = load_scenario(path)
    run_scenario(scenario)
    assert asked and set(asked) == {cast}
    _, work = scenario_layer_work(scenario)
    assert ("cast_moe_dispatch" in work["fwd"].names()) is cast


def test_the_default_nvlink_efficiency_is_the_intranode_rows_fit(shared_data) -> None:
    """The default is what DeepEP's own EP 8 rows give (compare_deepep.py --fit), so a
    change of the model that moves the fit shows here, not as a silent drift."""
    from tests.conftest import load_script

    compare = load_script("validation/deepep/compare_deepep.py", "compare_deepep")
    fitted = compare.fit_intranode(shared_data / "kernels" / "deepep")
    assert fitted == CommParams().deepep_nvlink_efficiency


def test_the_sm_rate_is_a_communication_key(write_scenario, tmp_path,
                                            b200_moe_scenario) -> None:
    """``communication.deepep_sm_rate`` sets what an SM streams and
    ``deepep_sm_token_time`` what it spends a token (a run bound at the user's own
    figures has nothing to say about them); bad ones are clear errors."""
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    params = comm_params_from_mapping({"all_to_all": "deepep", "deepep_sm_rate": "12 GB/s",
                                       "deepep_sm_token_time": "0.2 us"})
    assert params.deepep_sm_bytes_per_s == 12e9 and params.deepep_sm_token_s == 0.2e-6
    assert params.to_dict()["deepep_sm_bytes_per_s"] == 12e9
    assert params.to_dict()["deepep_sm_token_s"] == pytest.approx(0.2e-6)
    with pytest.raises(DistsimError, match=r"communication\.deepep_sm_rate: bandwidth must be"):
        comm_params_from_mapping({"deepep_sm_rate": "-3 GB/s"}, prefix="communication")
    with pytest.raises(DistsimError, match=r"communication\.deepep_sm_token_time"):
        comm_params_from_mapping({"deepep_sm_token_time": "fast"}, prefix="communication")
    base = b200_moe_scenario
    times, notes = {}, {}
    for name, keys in {"slow": {"deepep_sm_rate": "9 GB/s"}, "default": {},
                        "slow tokens": {"deepep_sm_token_time": "2 us"}}.items():
        path = write_scenario(tmp_path / "moe.yaml", {**base, "communication": {
            "all_to_all": "deepep", **keys}})
        result = run_scenario(load_scenario(path))
        times[name] = result.iteration_time_s
        notes[name] = [n for n in result.notes if n.key == "communication.deepep_sm_rate"]
    assert times["slow"] > times["default"] and times["slow tokens"] > times["default"]
    assert notes["default"] and not notes["slow"] and not notes["slow tokens"]


def test_the_default_sm_costs_are_b200s_sweep_fit(shared_data) -> None:
    """The defaults are what B200's dispatch rows give (compare_sms.py --fit)."""
    from tests.conftest import load_script

    compare = load_script("validation/deepep/compare_sms.py", "compare_sms")
    params = CommParams()
    assert compare.fit_sm_costs(shared_data / "kernels" / "deepep") == (
        params.deepep_sm_token_s, params.deepep_sm_bytes_per_s)


@pytest.mark.parametrize(("preset", "gpu", "sms", "bound"), [
    ("dgx-b200", "b200", 16, 295),     # 16 · 18.44 GB/s = 295 < 900 · 0.82 · 0.84 = 620
    ("dgx-b200", "b200", 36, None),    # 664 GB/s: NVLink binds first
    ("dgx-h100", "h100-sxm", 20, None),  # 369 > 450 · 0.82 · 0.84 = 310
    ("dgx-h100", "h100-sxm", 0, None),   # SMs not counted: said so
])
def test_a_deepep_run_says_what_its_sms_did(write_scenario, tmp_path, preset, gpu, sms,
                                            bound) -> None:
    """A run whose SMs bind DeepEP's copies of its 16-bit tokens (7,168 wide: 18.44 GB/s an
    SM) says at what rate, naming communication.deepep_sm_rate; one whose NVLink binds
    first says nothing; one that counts no SMs says that, naming compute.comm_sms."""
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    path = write_scenario(tmp_path / "moe.yaml", {
        "name": "moe", "cluster": {"preset": preset, "nodes": 1},
        "model": {"name": "m", "layers": 2, "hidden": 7168, "heads": 56, "seq_len": 1024,
                  "vocab": 32000, "experts": 16, "top_k": 4},
        "parallelism": {"dp": 8, "ep": 8}, "training": {"micro_batch": 1, "global_batch": 8},
        "communication": {"all_to_all": "deepep"},
        "compute": {"gpu": gpu, "costs": "roofline", "comm_sms": sms}})
    scenario = load_scenario(path)
    assert scenario.comm.deepep_sms == sms
    mine = [n for n in run_scenario(scenario).notes
            if n.key in ("compute.comm_sms", "communication.deepep_sm_rate")]
    assert len(mine) == (bound is not None or sms == 0)
    if bound:
        assert mine[0].kind == "defaulted"
        assert mine[0].key == "communication.deepep_sm_rate"
        assert f"bound by its {sms} SMs: {bound} GB/s a GPU of NVLink's 620 for 16-bit " \
            "tokens, 18 GB/s an SM (0.40 us a token and 38 GB/s" in mine[0].message
        assert scenario.comm.moe_tokens == 1024 and scenario.comm.moe_hidden == 7168
    if sms == 0:
        assert mine[0].key == "compute.comm_sms"
        assert "compute.comm_sms is 0: DeepEP's kernels take no SMs" in mine[0].message


@pytest.mark.parametrize(("preset", "gpu", "given", "noted"), [
    ("dgx-b200", "b200", None, True),       # H800's figure taken on Blackwell: said
    ("dgx-b200", "b200", 0.7, False),       # the user's own figure: nothing to say
    ("dgx-h100", "h100-sxm", None, False),  # the generation it was fitted on
])
def test_deepeps_copy_fraction_off_its_generation_is_a_note(write_scenario, tmp_path, preset,
                                                            gpu, given, noted) -> None:
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    comm = {"all_to_all": "deepep",
            **({} if given is None else {"deepep_nvlink_efficiency": given})}
    path = write_scenario(tmp_path / "moe.yaml", {
        "name": "moe", "cluster": {"preset": preset, "nodes": 1},
        "model": {"name": "m", "layers": 2, "hidden": 1024, "heads": 16, "seq_len": 1024,
                  "vocab": 32000, "experts": 16, "top_k": 4},
        "parallelism": {"dp": 8, "ep": 8}, "training": {"micro_batch": 1, "global_batch": 8},
        "communication": comm,
        "compute": {"gpu": gpu, "costs": "roofline", "comm_sms": 48}})
    notes = [n for n in run_scenario(load_scenario(path)).notes
             if n.key == "communication.deepep_nvlink_efficiency"]
    assert bool(notes) == noted
    if noted:
        assert notes[0].kind == "defaulted"
        assert "0.84 of NCCL's payload rate" in notes[0].message
        assert "blackwell GPUs" in notes[0].message


def test_halves_exchanges_carry_half_the_tokens_at_the_same_width(write_scenario,
                                                                  tmp_path) -> None:
    """Under ``moe_overlap`` every exchange is half a micro-batch's: the tokens a call
    carries are halved with it, so a half's tokens keep their 7,168 16-bit elements
    (14,336 bytes) and DeepEP's SMs spend their time per token on half as many."""
    from distsim_gpu.scenarios.scenario import load_scenario
    from distsim_gpu.workloads.cost.traffic import alltoall_bytes

    def comm(overlap: bool) -> CommParams:
        path = write_scenario(tmp_path / "moe.yaml", {
            "name": "moe", "cluster": {"preset": "dgx-b200", "nodes": 1},
            "model": {"name": "m", "layers": 2, "hidden": 7168, "heads": 56,
                      "seq_len": 1024, "vocab": 32000, "experts": 16, "top_k": 4},
            "parallelism": {"dp": 8, "ep": 8, "moe_overlap": overlap},
            "training": {"micro_batch": 1, "global_batch": 8},
            "communication": {"all_to_all": "deepep"},
            "compute": {"gpu": "b200", "costs": "roofline", "comm_sms": 16}})
        scenario = load_scenario(path)
        full = alltoall_bytes(scenario.model, scenario.parallel, scenario.training)
        return scenario.comm, full

    whole, full = comm(False)
    halves, _ = comm(True)
    assert (whole.moe_tokens, halves.moe_tokens) == (1024, 512)
    assert whole.token_bytes(full) == halves.token_bytes(full / 2) == 14336.0


def test_a_deepep_run_says_its_hosts_wait_for_the_token_counts_is_left_out():
    """DeepEP's normal dispatch makes the CPU wait for the received-token counts; distsim
    does not count the GPU's wait for the host after it, and every DeepEP run says so."""
    from distsim_gpu.scenarios.run_notes import deepep_notes
    from distsim_gpu.workloads.cost.compute import RooflineCosts
    from distsim_gpu.workloads.specs.gpus import get_gpu

    costs = RooflineCosts(get_gpu("h100-sxm"), "bf16")
    notes = deepep_notes(CommParams(all_to_all="deepep"), costs, TOPOLOGY)
    sync = [n for n in notes if n.key == "communication.all_to_all"]
    assert len(sync) == 1 and sync[0].kind == "unmodelled" and "host" in sync[0].message
    assert not deepep_notes(CommParams(all_to_all="flat"), costs, TOPOLOGY)


def test_exchanges_whose_sms_bind_alike_share_a_plan() -> None:
    """Exchanges of tokens of different sizes (a dispatch's and a combine's under FP8,
    two models' widths) run one plan where the SMs slow neither (20 SMs on Hopper and
    16-bit tokens 7,168 and 8,192 wide: the factor 1), and each its own where they bind
    (12 SMs), the NVLink copies of the smaller tokens held longer by the factors' ratio."""
    from distsim_gpu.collectives.communicator import Communicator
    from distsim_gpu.simcore.simulation import Simulation

    hopper = replace(CommParams().on_architecture("hopper"), all_to_all="deepep",
                     moe_experts=256, moe_top_k=8, moe_tokens=4096)
    copies = 8 * 4096
    narrow, wide = copies * 7168 * 2.0, copies * 8192 * 2.0
    comm = Communicator(Simulation(), TOPOLOGY, replace(hopper, deepep_sms=20))
    assert comm.choose("alltoall", GPUS, narrow) is comm.choose("alltoall", GPUS, wide)
    bound = replace(hopper, deepep_sms=12)
    comm = Communicator(Simulation(), TOPOLOGY, bound)
    slow, fast = comm.choose("alltoall", GPUS, narrow), comm.choose("alltoall", GPUS, wide)
    ratio = (sm_bound_factor(TOPOLOGY, bound, narrow / copies)
             / sm_bound_factor(TOPOLOGY, bound, wide / copies))
    assert slow is not fast and ratio > 1.0
    held = {link: n for step in slow.steps for link, n in step.link_streams.items()}
    base = {link: n for step in fast.steps for link, n in step.link_streams.items()}
    port = ("n0.gpu0", "n0.nvswitch")  # its NVLink port
    assert held[port] / base[port] == pytest.approx(ratio)
