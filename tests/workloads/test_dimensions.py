"""The parallelism-dimension registry: each built-in entry is pinned to the physics it
stands for (communicator kind, flow tag, who meets, folding unit, critical-path label,
summary form, search axis), and a registered toy dimension is seen by every lookup and
gone after."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from distsim_gpu.simcore.errors import ConfigError, SimulationError
from distsim_gpu.workloads.iteration.timeline import CRITICAL_KINDS
from distsim_gpu.workloads.strategy import dimensions as dims
from distsim_gpu.workloads.strategy.dimensions import (
    DIMENSIONS,
    Dimension,
    FoldUnit,
    PeerGroup,
    Peering,
    async_handle,
    critical_kinds,
    dimension,
    dimensions,
    folding_unit,
    peer_degrees,
    peer_group,
    peer_groups,
    register,
    registered,
    stage_sets,
    strategy_summary,
)
from distsim_gpu.workloads.strategy.parallel import ParallelConfig


def test_the_built_in_dimensions_in_summary_order() -> None:
    assert [d.name for d in DIMENSIONS] == ["tp", "pp", "dp", "dp_replicate", "ep",
                                            "expert_tp", "cp"]
    assert dimensions()[:len(DIMENSIONS)] == DIMENSIONS


@pytest.mark.parametrize(("group", "kind", "tag", "peering"), [
    ("tp", "tp comm", "tp", Peering.OWN),
    ("ep", "ep comm", "ep", Peering.BLOCK),
    ("dp", "dp comm", "dp", Peering.STAGE),
    ("embedding", "dp comm", "dp", Peering.ENDS),
    ("dp_shard", "dp comm", "dp", Peering.STAGE),
    ("dp_replicate", "dp comm", "dp", Peering.STAGE),
    ("cp", "cp comm", "cp", Peering.BLOCK),
])
def test_each_communicator_keeps_the_kind_and_tag_the_iteration_gave_it(
        group: str, kind: str, tag: str, peering: Peering) -> None:
    peer = peer_group(group)
    assert (peer.comm_kind, peer.tag, peer.peering) == (kind, tag, peering)
    # Only context parallelism's calls are ring steps (sends to the next member).
    assert peer.ring is (group == "cp")


def test_hsdp_groups_are_the_shard_blocks_and_the_replicas_across_them() -> None:
    """dp 4 x cp 2 in 2 replicate groups: shard groups of 4 consecutive replicas (cp
    innermost), replicate groups of the replicas 4 apart; one set of all without HSDP."""
    hsdp = ParallelConfig(dp=4, cp=2, fsdp=True, dp_replicate=2)
    assert stage_sets(peer_group("dp_shard"), hsdp) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert stage_sets(peer_group("dp_replicate"), hsdp) == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert stage_sets(peer_group("dp"), hsdp) == (tuple(range(8)),)
    assert strategy_summary(hsdp) == "tp 1 · pp 1 · dp 4 · dp_replicate 2 · cp 2"
    assert strategy_summary(ParallelConfig(dp=4)) == "tp 1 · pp 1 · dp 4"


def test_critical_path_kinds_follow_the_registry() -> None:
    assert critical_kinds() == ("tp comm", "pp transfer", "dp comm", "ep comm", "cp comm")
    assert CRITICAL_KINDS == ("compute", "host", "tp comm", "pp transfer", "dp comm",
                              "ep comm", "cp comm", "bubble wait", "data loading")


@pytest.mark.parametrize(("parallel", "name", "unit"), [
    (ParallelConfig(dp=8), None, 1),
    (ParallelConfig(dp=8, ep=4), "ep", 4),
    (ParallelConfig(dp=4, cp=2), "cp", 2),
    (ParallelConfig(tp=2, pp=2, dp=2), None, 1),
])
def test_the_folding_unit_is_an_expert_block_else_a_context_ring_else_a_replica(
        parallel: ParallelConfig, name: str | None, unit: int) -> None:
    found, size = folding_unit(parallel)
    assert (None if found is None else found.name, size) == (name, unit)
    # Replicas fold by expert-parallel blocks where there are some, else by CP rings.
    assert size == (parallel.ep if parallel.ep > 1 else parallel.cp)


def test_fold_units_name_their_blocks() -> None:
    assert dimension("ep").fold_unit == FoldUnit("expert-parallel", "block",
                                                 "expert parallelism")
    assert dimension("cp").fold_unit == FoldUnit("context-parallel", "ring",
                                                 "context parallelism")
    assert all(dimension(n).fold_unit is None for n in ("tp", "pp", "dp"))


def test_degrees_are_read_from_the_parallel_config() -> None:
    par = ParallelConfig(tp=2, pp=3, dp=4, ep=2, cp=1)
    assert {d.name: d.degree(par) for d in DIMENSIONS} == {
        "tp": 2, "pp": 3, "dp": 4, "dp_replicate": 1, "ep": 2, "expert_tp": 2, "cp": 1}
    assert peer_degrees(par) == {"tp": 2, "embedding": 3, "mirror": 3, "dp": 4,
                               "dp_shard": 1, "dp_replicate": 1, "ep": 2, "cp": 1,
                               "cp_collective": 1}


def _summary_as_the_report_prints_it(par: dict[str, Any]) -> str:
    # The summary's degrees: tp, pp and dp always, ep and cp above 1.
    line = f"tp {par.get('tp')} · pp {par.get('pp')} · dp {par.get('dp')}"
    if par.get("ep", 1) > 1:
        line += f" · ep {par['ep']}"
    if par.get("cp", 1) > 1:
        line += f" · cp {par['cp']}"
    return line


@pytest.mark.parametrize("par", [
    {"tp": 1, "pp": 1, "dp": 1},
    {"tp": 8, "pp": 4, "dp": 32, "ep": 1, "cp": 1},
    {"tp": 2, "pp": 1, "dp": 16, "ep": 8},
    {"tp": 4, "pp": 2, "dp": 2, "cp": 4},
])
def test_the_summary_prints_as_the_report_does(par: dict[str, Any]) -> None:
    assert strategy_summary(ParallelConfig(**par)) == _summary_as_the_report_prints_it(par)
    assert dimension("tp").printed(4) == "tp 4"
    assert dimension("cp").printed(1) is None


def test_search_axes() -> None:
    # A search ranges over tp, pp, ep and cp (dp follows from the cluster), and tries
    # context parallelism only when its space asks.
    assert [d.name for d in DIMENSIONS if d.searched] == ["tp", "pp", "ep", "cp"]
    assert dimension("cp").search_default == (1,)
    assert all(dimension(n).search_default is None for n in ("tp", "pp", "dp", "ep"))


def test_unknown_names_are_errors_that_say_what_is_valid() -> None:
    with pytest.raises(ConfigError, match="unknown parallelism dimension 'tpp'") as info:
        dimension("tpp")
    assert "tp" in str(info.value.hint)
    with pytest.raises(SimulationError, match="no collective among 'xp'"):
        peer_group("xp")


def test_async_handles_keep_groups_apart() -> None:
    assert async_handle("ep", "layer 3 dispatch A") == "ep:layer 3 dispatch A"
    assert async_handle("cp", "x") != async_handle("ep", "x")


# An expert-tensor-parallel dimension, as a new one would be added: a block of replicas
# that all-to-all among themselves and fold by that block.
_TOY = Dimension("etp", lambda par: 2, "etp comm",
                 (PeerGroup("etp", "etp comm", Peering.BLOCK, "etp"),),
                 FoldUnit("expert-tensor-parallel", "block", "expert tensor parallelism"),
                 always_printed=False)


@pytest.fixture
def toy() -> Iterator[Dimension]:
    with registered(_TOY) as dim:
        yield dim


def test_a_registered_dimension_is_seen_by_every_lookup(toy: Dimension) -> None:
    assert dimension("etp") is toy
    assert dimensions()[-1] is toy and dimensions()[:len(DIMENSIONS)] == DIMENSIONS
    assert peer_group("etp").comm_kind == "etp comm"
    assert peer_groups()["etp"].peering is Peering.BLOCK
    assert peer_degrees(ParallelConfig())["etp"] == 2
    assert critical_kinds()[-1] == "etp comm"
    assert strategy_summary(ParallelConfig(tp=2, dp=4)) == "tp 2 · pp 1 · dp 4 · etp 2"
    # The built-in units come first: with neither ep nor cp the toy's block is the unit.
    assert folding_unit(ParallelConfig(dp=8)) == (toy, 2)
    assert folding_unit(ParallelConfig(dp=8, ep=4))[0] is dimension("ep")
    with pytest.raises(ValueError, match="registered already"):
        register(_TOY)


def test_a_block_dimension_must_be_a_folding_unit() -> None:
    unfolded = Dimension("etp", lambda par: 2, "etp comm",
                         (PeerGroup("etp", "etp comm", Peering.BLOCK, "etp"),))
    with pytest.raises(ValueError, match="no fold_unit"):
        register(unfolded)
    assert "etp" not in peer_groups()


def test_a_registration_ends_with_its_block() -> None:
    with registered(_TOY):
        assert "etp" in peer_groups()
    assert "etp" not in peer_groups()
    assert [d.name for d in dimensions()] == ["tp", "pp", "dp", "dp_replicate", "ep",
                                              "expert_tp", "cp"]
    assert dims.folding_unit(ParallelConfig(dp=8)) == (None, 1)
