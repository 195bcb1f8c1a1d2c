"""``simulation.seed`` reaches what is random: ECMP's hashes and drawn stragglers; the same
seed repeats a run exactly, and seed 0 keeps the fabric's own routes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.errors import ConfigError

QUICKSTART = Path(__file__).parents[2] / "scenarios" / "examples" / "quickstart.yaml"
# Eight nodes on Ethernet (ECMP): replicas' all-reduces cross hashed spine paths.
ETHERNET = [("cluster.fabric.technology", "ethernet"), ("cluster.nodes", 8),
            ("parallelism.dp", 8)]


def _scenario(seed: int, extra=()):
    return load_scenario(QUICKSTART, [*ETHERNET, ("simulation.seed", seed), *extra])


def _inter_node_routes(topology):
    gpus = topology.gpus[::8]
    return {(a, b): topology.route(a, b) for a in gpus for b in gpus if a != b}


def test_seed_zero_keeps_the_fabric_hash_seed():
    base = load_scenario(QUICKSTART, ETHERNET)
    assert _scenario(0).topology.routing == base.topology.routing
    assert base.topology.routing.hash_seed == 0


def test_seeds_rehash_ecmp_routes_and_change_the_time():
    routes = [_inter_node_routes(_scenario(seed).topology) for seed in (0, 1, 2)]
    assert routes[0] != routes[1] != routes[2]
    assert routes[1] == _inter_node_routes(_scenario(1).topology)
    times = {seed: run_scenario(_scenario(seed)).iteration_time_s for seed in (1, 2)}
    assert times[1] != times[2]  # (different collisions on the spines)


def test_static_routing_ignores_the_seed():
    static = [("cluster.fabric.technology", "infiniband"),
              ("cluster.fabric.routing", "dmodk")]
    one, two = (_scenario(seed, static).topology for seed in (1, 2))
    assert one.routing == two.routing
    assert _inter_node_routes(one) == _inter_node_routes(two)


def test_seed_draws_stragglers():
    jitter = [("stragglers", {"jitter": {"sigma": 0.05}})]
    one, two, again = (_scenario(seed, jitter).stragglers for seed in (1, 2, 1))
    assert one == again and one != two


def test_same_seed_same_output_byte_for_byte(capsys):
    outputs = []
    for _ in range(2):
        assert main(["run", str(QUICKSTART), "--json", "--set", "simulation.seed=3",
                     "--set", "stragglers={jitter: {sigma: 0.05}}"]) == 0
        data = json.loads(capsys.readouterr().out)
        data.pop("wall_time_s")  # (host time: the one field that may differ)
        outputs.append(json.dumps(data, sort_keys=True))
    assert outputs[0] == outputs[1]


def test_the_seed_is_checked_before_it_draws_the_fabric_hashes():
    # A seed that is not a whole number is the seed's error, even on a cluster whose
    # ECMP hashes it would draw (and whose own error, were there one, comes after).
    for bad in ("1.5", True, "seven"):
        with pytest.raises(ConfigError) as info:
            load_scenario(QUICKSTART, [*ETHERNET, ("simulation.seed", bad),
                                       ("cluster.fabric.oversubscription", -1)])
        assert info.value.key == "simulation.seed"
