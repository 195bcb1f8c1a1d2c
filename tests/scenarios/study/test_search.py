"""``distsim search``: enumeration counted by hand, branch and bound against brute force,
memory pruning, the output files and the command line."""

from __future__ import annotations

import argparse
import csv

import pytest
from distsim_gpu.scenarios.cli.search import add_parser
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario, scenario_from_mapping
from distsim_gpu.scenarios.study.search import (
    Strategy,
    enumerate_strategies,
    format_search,
    search_strategies,
)
from distsim_gpu.scenarios.study.search_space import with_strategy
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.workloads.cost.memory import memory_per_gpu
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

MODEL = {"name": "tiny-search", "layers": 4, "hidden": 512, "heads": 8, "seq_len": 256,
         "vocab": 1000}


def mapping(link_bandwidth: str = "100 GB/s", gpu: object = "a100-80gb") -> dict:
    return {
        "name": "tiny-search",
        "cluster": {"preset": "switch", "gpus": 4, "link_bandwidth": link_bandwidth},
        "model": dict(MODEL),
        "parallelism": {"tp": 1, "pp": 1, "dp": 4},
        "training": {"micro_batch": 1, "global_batch": 8, "recompute": "none"},
        "compute": {"gpu": gpu},
    }


# The restricted space of the hand counts (everything else fixed).
NARROW = {"schedule": ["1f1b"], "recompute": ["none"], "zero": [0], "order": ["tp-dp-pp"],
          "sequence_parallel": [False], "micro_batch": [1, 2]}
# A richer space for the brute-force comparisons (52 candidates, 48 valid).
RICH = {"schedule": ["1f1b", "interleaved"], "interleave": [2], "recompute": ["none", "full"],
        "zero": [0], "order": ["tp-dp-pp"], "sequence_parallel": [False, True],
        "micro_batch": [1, 2]}


def test_enumeration_matches_the_hand_count():
    scenario = scenario_from_mapping(mapping())
    # (tp, pp, dp) on 4 GPUs with tp | 4 and 8 heads, pp | 4 layers: (1,1,4) (1,2,2)
    # (1,4,1) (2,1,2) (2,2,1) (4,1,1); micro-batch 1 or 2 always divides 8/dp.
    strategies = enumerate_strategies(scenario, space=NARROW)
    assert len(strategies) == 6 * 2
    assert len(set(strategies)) == len(strategies)
    assert {(s.parallel.tp, s.parallel.pp, s.parallel.dp) for s in strategies} == {
        (1, 1, 4), (1, 2, 2), (1, 4, 1), (2, 1, 2), (2, 2, 1), (4, 1, 1)}
    # Sequence parallel only with tp > 1 (3 of the 6), ZeRO-1 only with dp > 1 (3 of 6),
    # dp-tp-pp only where it changes which GPUs share a node: never on this one 4-GPU
    # node (tp·dp of (2,1,2) fills it either way).  Per micro-batch
    # (1,1,4) 2 + (1,2,2) 2 + (1,4,1) 1 + (2,1,2) 2·2 + (2,2,1) 2 + (4,1,1) 2 = 13.
    wide = dict(NARROW, sequence_parallel=[False, True], zero=[0, 1],
                order=["tp-dp-pp", "dp-tp-pp"])
    assert len(enumerate_strategies(scenario, space=wide)) == 13 * 2


def test_placement_orders_are_candidates_only_where_they_change_a_domain():
    """On 2 DGX H100 nodes, tp 4 · dp 4: tp-dp-pp puts a tensor-parallel group and two
    replicas in a node, dp-tp-pp a data-parallel group and half of two tp groups — a
    different split, so both are candidates; tp 2 · dp 4 fills one node either way.
    GPipe and 1F1B at pp 1 are one strategy, listed once."""
    scenario = scenario_from_mapping({
        **mapping(), "cluster": {"preset": "dgx-h100", "nodes": 2},
        "parallelism": {"tp": 1, "pp": 1, "dp": 16},
        "training": {"micro_batch": 1, "global_batch": 32, "recompute": "none"}})
    space = dict(NARROW, order=["tp-dp-pp", "dp-tp-pp"], micro_batch=[1],
                 schedule=["1f1b", "gpipe"])
    found = {(s.parallel.tp, s.parallel.pp, s.parallel.dp, s.parallel.order,
              s.parallel.schedule) for s in enumerate_strategies(scenario, space=space)}
    assert (4, 1, 4, "dp-tp-pp", "1f1b") in found
    assert (2, 2, 4, "dp-tp-pp", "1f1b") not in found  # 2·4 = one node either way
    assert not any(schedule == "gpipe" and pp == 1 for _, pp, _, _, schedule in found)
    assert (2, 2, 4, "tp-dp-pp", "gpipe") in found


def test_invalid_candidates_are_counted_by_reason():
    scenario = scenario_from_mapping(mapping())
    space = dict(NARROW, schedule=["1f1b", "interleaved"], interleave=[2])
    # Interleaved adds one candidate per pp >= 2 combination: (1,2,2) (1,4,1) (2,2,1) × 2
    # micro-batches; pp 4 × interleave 2 does not divide 4 layers: 2 invalid.
    result = search_strategies(scenario, top=3, workers=1, space=space)
    assert result.enumerated == 12 + 6
    assert result.pruned_counts["invalid"] == 2
    assert result.invalid_reasons == {"parallelism.pp": 2}
    assert all(p.strategy.parallel.pp == 4
               and p.strategy.parallel.schedule == "interleaved"
               for p in result.pruned if p.reason == "invalid")
    assert (result.simulated + sum(result.pruned_counts.values()) == result.enumerated)


def brute_force(data: dict, space: dict) -> list[tuple[float, Strategy]]:
    """Every candidate of ``space`` that loads and fits, simulated from its own mapping."""
    scenario = scenario_from_mapping(data)
    times = []
    for strategy in enumerate_strategies(scenario, space=space):
        try:
            candidate = scenario_from_mapping(data, overrides=strategy.overrides().items())
            report = run_scenario(candidate)
        except DistsimError:
            continue  # invalid or out of memory
        times.append((report.iteration_time_s, strategy))
    return sorted(times, key=lambda t: t[0])


@pytest.mark.parametrize("bandwidth", ["2 GB/s", "600 GB/s"])
def test_search_finds_the_brute_force_optimum(bandwidth):
    data = mapping(bandwidth)
    expected = brute_force(data, RICH)
    result = search_strategies(scenario_from_mapping(data), top=3, workers=1, space=RICH)
    assert result.best is not None
    assert result.best.iteration_time_s == pytest.approx(expected[0][0], rel=1e-9)
    # The top K equal brute force's K best times (ties may swap strategies).
    assert [r.iteration_time_s for r in result.top] == pytest.approx(
        [t for t, _ in expected[:3]], rel=1e-9)
    # The bound is a lower bound of every simulated time.
    for r in result.results:
        assert r.lower_bound_s <= r.iteration_time_s * (1 + 1e-9)
    assert result.enumerated == 52
    assert result.simulated + sum(result.pruned_counts.values()) == result.enumerated
    if bandwidth == "2 GB/s":
        assert result.best.strategy.parallel.tp == 1  # tensor parallelism hurts on a slow network
    else:
        # Compute dominates on a fast network: the bound prunes candidates.
        assert result.pruned_counts["bound"] > 0


def _pure_dp_bytes(micro_batch: int) -> float:
    """What one GPU of pure data parallelism (dp 4) needs at ``micro_batch``."""
    return memory_per_gpu(_model(), ParallelConfig(dp=4),
                          TrainingConfig(micro_batch=micro_batch, seq_len=256),
                          flash_attention=True).total_bytes


def test_out_of_memory_candidates_are_pruned_for_memory():
    pure_dp = _pure_dp_bytes(2)
    # A GPU just too small for pure data parallelism at micro-batch 2.
    gpu = {"preset": "a100-80gb", "memory": int(pure_dp * 0.99)}
    scenario = scenario_from_mapping(mapping(gpu=gpu))
    result = search_strategies(scenario, top=2, workers=1, space=NARROW)
    oom = [p for p in result.pruned if p.reason == "memory"]
    assert Strategy.on(scenario, tp=1, pp=1, dp=4, micro_batch=2) in {p.strategy for p in oom}
    assert result.pruned_counts["memory"] == len(oom) >= 1
    assert all(p.peak_memory_bytes > gpu["memory"] for p in oom)
    # Every simulated candidate fits.
    assert all(r.peak_memory_bytes <= gpu["memory"] for r in result.results)
    # The baseline is pure data parallel at the micro-batch that fits.
    assert result.baseline is not None
    assert result.baseline.strategy == Strategy.on(scenario, tp=1, pp=1, dp=4,
                                                         micro_batch=1)


def _model():
    from distsim_gpu.workloads.specs.models import model_from_mapping
    return model_from_mapping(dict(MODEL))


def test_outputs_are_written_and_best_yaml_reproduces_the_best(tmp_path):
    scenario = scenario_from_mapping(mapping("20 GB/s"))
    out = tmp_path / "search"
    result = search_strategies(scenario, top=3, workers=1, space=NARROW, out_dir=out)
    assert set(result.files) == {"results.csv", "pruned.csv", "best.yaml"}
    with open(out / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == result.simulated
    assert float(rows[0]["iteration_time_s"]) == pytest.approx(result.best.iteration_time_s)
    with open(out / "pruned.csv", newline="") as handle:
        pruned = list(csv.DictReader(handle))
    assert len(pruned) == sum(result.pruned_counts.values())
    reasons = ("invalid", "memory", "bound", "time limit", "error")
    assert all(row["reason"] in reasons for row in pruned)
    best = load_scenario(out / "best.yaml")
    assert best.parallel.tp == result.best.strategy.parallel.tp
    assert run_scenario(best).iteration_time_s == pytest.approx(
        result.best.iteration_time_s, rel=1e-12)
    text = format_search(result)
    assert "enumerated 12" in text and "faster" in text


def test_time_limit_stops_starting_simulations():
    scenario = scenario_from_mapping(mapping("20 GB/s"))
    result = search_strategies(scenario, top=2, workers=1, space=NARROW, time_limit_s=1e-9)
    # Only the baseline (pure data parallel, a candidate here) ran.
    assert [r.strategy for r in result.results] == [Strategy.on(scenario, tp=1, pp=1, dp=4)]
    assert result.pruned_counts["time limit"] == 12 - 1 - result.pruned_counts["memory"]
    assert "time limit 11" in format_search(result)


def test_worker_processes_agree_with_in_process():
    scenario = scenario_from_mapping(mapping("20 GB/s"))
    here = search_strategies(scenario, top=2, workers=1, space=NARROW)
    pooled = search_strategies(scenario, top=2, workers=2, space=NARROW)
    assert [r.iteration_time_s for r in pooled.top] == pytest.approx(
        [r.iteration_time_s for r in here.top], rel=1e-12)
    assert pooled.baseline is not None and here.baseline is not None
    assert pooled.baseline.iteration_time_s == pytest.approx(here.baseline.iteration_time_s)


def test_gpus_option_uses_whole_nodes():
    data = mapping()
    data["cluster"] = {"preset": "dgx-a100", "nodes": 2}
    data["parallelism"] = {"tp": 1, "pp": 1, "dp": 16}
    data["training"]["global_batch"] = 16
    scenario = scenario_from_mapping(data)
    result = search_strategies(scenario, gpus=8, top=1, workers=1, space=NARROW)
    assert result.num_gpus == 8
    assert all(r.strategy.parallel.num_gpus == 8 for r in result.results)
    with pytest.raises(ConfigError, match="whole nodes"):
        search_strategies(scenario, gpus=12, workers=1, space=NARROW)


def test_bad_space_axis_is_named():
    with pytest.raises(ConfigError) as info:
        search_strategies(scenario_from_mapping(mapping()), workers=1,
                          space={"shedule": ["1f1b"]})
    assert str(info.value).startswith("space.shedule: unknown search axis (did you mean "
                                      "'schedule'? valid: ")


@pytest.mark.parametrize(("options", "text"), [
    ({"top": 0}, "--top: must be a whole number >= 1, got 0"),
    ({"workers": True}, "--workers: must be a whole number >= 1, got True"),
    ({"gpus": 0}, "--gpus: must be a whole number >= 1, got 0"),
])
def test_bad_counts_are_named(options, text):
    with pytest.raises(ConfigError) as info:
        search_strategies(scenario_from_mapping(mapping()), **options)
    assert str(info.value) == text


def test_cli_handler_prints_the_table_and_writes_the_files(tmp_path, capsys):
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(mapping("600 GB/s")))
    parser = argparse.ArgumentParser(prog="distsim")
    add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "out"
    args = parser.parse_args(["search", str(path), "--top", "2", "--workers", "1",
                              "--out", str(out), "--set", "training.global_batch=4"])
    assert args.handler(args) == 0
    text = capsys.readouterr().out
    assert "distsim search: tiny-search on 4 GPUs, global batch 4" in text
    assert (out / "best.yaml").is_file() and (out / "results.csv").is_file()
    args = parser.parse_args(["search", str(path), "--gpus", "3", "--out", str(out)])
    with pytest.raises(ConfigError):
        args.handler(args)


def test_cli_json_prints_the_best_and_the_counts(tmp_path, capsys):
    import json

    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(mapping("600 GB/s")))
    parser = argparse.ArgumentParser(prog="distsim")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["search", str(path), "--top", "2", "--workers", "1", "--json",
                              "--out", str(tmp_path / "out"), "--set",
                              "training.global_batch=4"])
    assert args.handler(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_gpus"] == 4 and len(data["top"]) == 2
    assert data["simulated"] + sum(data["pruned"].values()) == data["enumerated"]
    first, second = data["top"]
    assert first["iteration_time_s"] <= second["iteration_time_s"]
    assert data["speedup"] == pytest.approx(
        data["baseline"]["iteration_time_s"] / first["iteration_time_s"])
    assert "best.yaml" in data["files"]


def test_without_a_fitting_pure_data_parallel_the_baseline_is_the_smallest_model_split():
    pure_dp = _pure_dp_bytes(1)
    # Too small for pure data parallelism at any micro-batch: the naive baseline is the
    # fitting strategy that splits the model least.
    gpu = {"preset": "a100-80gb", "memory": int(pure_dp * 0.6)}
    scenario = scenario_from_mapping(mapping(gpu=gpu))
    result = search_strategies(scenario, top=2, workers=1, space=NARROW)
    assert result.baseline_kind == "smallest model parallel"
    assert result.baseline is not None
    assert result.baseline.peak_memory_bytes <= gpu["memory"]
    # ZeRO or recomputation makes room without splitting the model: tp·pp stays 1.
    chosen, training = result.baseline.strategy.parallel, result.baseline.strategy.training
    assert chosen.tp * chosen.pp == 1
    assert chosen.zero > 0 or training.recompute != "none"


def test_schedules_at_pp_1_are_one_candidate():
    """gpipe and 1f1b differ only with a pipeline: (tp, pp, dp) with pp 1 are 3 of the 6
    splits, so two schedules give 3 + 2·3 = 9 candidates per micro-batch, not 12."""
    scenario = scenario_from_mapping(mapping())
    both = enumerate_strategies(scenario, space=dict(NARROW, schedule=["1f1b", "gpipe"]))
    assert len(both) == 9 * 2
    labels = [s.label() for s in both]
    assert len(set(labels)) == len(labels)
    assert not [s for s in both if s.parallel.pp == 1 and s.parallel.schedule == "gpipe"]


def test_search_lists_no_duplicate_strategy(tmp_path, capsys):
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(mapping("600 GB/s")))
    parser = argparse.ArgumentParser(prog="distsim")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["search", str(path), "--top", "50", "--workers", "1",
                              "--out", str(tmp_path / "out")])
    assert args.handler(args) == 0
    import csv

    from distsim_gpu.scenarios.study.search_space import STRATEGY_KEYS
    with open(tmp_path / "out" / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows
    keys = [tuple(v for k, v in row.items() if k in STRATEGY_KEYS) for row in rows]
    assert len(keys) == len(set(keys))
    assert not [row for row in rows if row["pp"] == "1" and row["schedule"] == "gpipe"]


def test_a_candidate_gets_its_stacks_overlaps_for_its_own_strategy():
    """The base runs tp 1, where NeMo's TP overlap has nothing to overlap; a tp-2
    candidate derived from it must run with the overlap on, as its own best.yaml does —
    unless the scenario set the key itself, which then stays."""
    def scenario(**parallelism):
        return scenario_from_mapping({
            **mapping(), "cluster": {"preset": "dgx-h100", "nodes": 1},
            "model": {**MODEL, "seq_len": 512},
            "parallelism": {"tp": 1, "pp": 1, "cp": 2, "dp": 4, "zero": 1, **parallelism},
            "training": {"micro_batch": 1, "global_batch": 8, "recompute": "none"},
            "compute": {"gpu": "h100-sxm", "stack": "nemo"}})
    base = scenario()
    assert not base.parallel.tp_comm_overlap
    strategy = Strategy.on(base, tp=2, pp=1, dp=4, cp=1, zero=1, sequence_parallel=True)
    candidate = with_strategy(base, strategy)
    assert candidate.parallel.tp_comm_overlap and candidate.parallel.overlap_param_gather
    resolved = scenario_from_mapping(candidate.resolved())
    assert resolved.parallel.tp_comm_overlap
    fixed = scenario(tp_comm_overlap=False, tp=2, cp=1, dp=4, sequence_parallel=True)
    assert not with_strategy(fixed, strategy).parallel.tp_comm_overlap


def test_a_candidate_gets_its_stacks_buckets_and_aligned_reductions():
    """An interleaved Megatron-Core base (aligned reductions, buckets at its dp): its 1F1B
    candidates are not refused for the base's align_grad_reduce, each takes the stack's
    buckets at its own dp, and under NeMo ZeRO-0 candidates are not refused for the
    base's parameter-gather overlap."""
    from distsim_gpu.scenarios.study.search_prune import check_candidate

    def scenario(stack: str):
        return scenario_from_mapping({
            **mapping(), "cluster": {"preset": "switch", "gpus": 64},
            "parallelism": {"tp": 1, "pp": 2, "dp": 32, "zero": 1, "schedule": "interleaved",
                            "interleave": 2},
            "training": {"micro_batch": 1, "global_batch": 128, "recompute": "none"},
            "compute": {"gpu": "a100-80gb", "stack": stack}})
    core = scenario("megatron-core")
    assert core.parallel.align_grad_reduce is True
    assert core.parallel.bucket_params == 40_000_000  # max(40M, 1M·32)
    one = Strategy.on(core, tp=1, pp=1, dp=64, zero=1)
    assert one.parallel.align_grad_reduce is None
    assert one.parallel.bucket_params == 64_000_000  # max(40M, 1M·64)
    candidate, pruned = check_candidate(core, one)
    assert pruned is None and candidate is not None
    nemo = scenario("nemo")
    assert nemo.parallel.overlap_param_gather
    plain = Strategy.on(nemo, tp=1, pp=2, dp=32, zero=0)
    assert not plain.parallel.overlap_param_gather
    assert check_candidate(nemo, plain)[1] is None


def test_search_counts_the_candidates_on_a_terminal_and_is_quiet_otherwise(
        tmp_path, monkeypatch):
    """A search runs for minutes: on a terminal the progress line counts the queued
    candidates decided (simulated or pruned) to the last; with -q nothing is drawn."""
    import io

    import yaml
    from distsim_gpu.simcore import progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    drawn: list[tuple[int, int, str]] = []
    real = progress.Reporter.stage

    def stage(self, done: int, total: int, what: str = "") -> None:
        drawn.append((done, total, what))
        real(self, done, total, what)

    monkeypatch.setattr(progress.Reporter, "stage", stage)
    monkeypatch.setattr("sys.stderr", Terminal())
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(mapping("600 GB/s")))
    parser = argparse.ArgumentParser(prog="distsim")
    add_parser(parser.add_subparsers(dest="command"))
    argv = ["search", str(path), "--workers", "1", "--out", str(tmp_path / "out")]
    args = parser.parse_args(argv)
    assert args.handler(args) == 0
    done, total, what = drawn[-1]
    assert (done, what) == (total, "candidates") and total > 1
    assert [d for d, _t, _w in drawn] == list(range(1, total + 1))
    drawn.clear()
    args = parser.parse_args([*argv[:-2], "--out", str(tmp_path / "out2"), "-q"])
    assert args.handler(args) == 0
    assert drawn == []


def test_a_label_names_only_what_the_strategy_sets():
    """A dense model's candidates have no expert_tp (it would read as an expert split);
    a non-default tensor-parallel mode is named, as the run summary names it."""
    scenario = scenario_from_mapping(mapping())
    labels = [s.label() for s in enumerate_strategies(scenario, space=NARROW)]
    assert [label for label in labels if label.startswith("tp4")]
    assert not [label for label in labels if "expert_tp" in label]
    base = mapping()
    base["parallelism"] = {"tp": 4, "pp": 1, "dp": 1, "tp_mode": "2d"}
    base["training"]["micro_batch"] = 2
    two_d = enumerate_strategies(scenario_from_mapping(base), space=NARROW)
    assert [s.label() for s in two_d if s.parallel.tp == 4] == [
        "tp4 pp1 dp1, tp_mode 2d, mb1, 1f1b, recompute none",
        "tp4 pp1 dp1, tp_mode 2d, mb2, 1f1b, recompute none"]


def test_the_two_chunk_schedules_are_searched_with_two_chunks_a_stage():
    """``space: {schedule: [dualpipev, dualpipe]}`` runs them with their two chunks a stage,
    at pp >= 2 (DualPipe where the micro-batches allow it), each above its bound."""
    data = dict(mapping(), training={"micro_batch": 1, "global_batch": 16,
                                     "recompute": "none"})
    space = dict(NARROW, schedule=["1f1b", "dualpipev", "dualpipe"], micro_batch=[1])
    result = search_strategies(scenario_from_mapping(data), top=50, workers=1, space=space)
    two = [r.strategy.parallel for r in result.results
           if r.strategy.parallel.schedule in ("dualpipev", "dualpipe")]
    assert {p.schedule for p in two} == {"dualpipev", "dualpipe"}
    assert all(p.interleave == 2 and p.pp >= 2 for p in two)
    for r in result.results:
        assert r.lower_bound_s <= r.iteration_time_s * (1 + 1e-9)


def _cli(tmp_path, data, *extra):
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    parser = argparse.ArgumentParser(prog="distsim")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["search", str(path), "--workers", "1", "--out",
                              str(tmp_path / "out"), *extra])


def test_a_search_that_simulates_nothing_says_why_and_fails(tmp_path, capsys):
    """A NIC lost mid-run stops every candidate's job: the search exits 1 and names the
    failure its candidates share, not only the count."""
    data = {**mapping(), "cluster": {"preset": "dgx-a100", "nodes": 2},
            "faults": [{"target": "nic", "name": "n1.nic3", "kind": "down", "at_s": 1e-4}],
            "parallelism": {"tp": 1, "pp": 1, "dp": 16}, "training": {
                "micro_batch": 1, "global_batch": 16, "recompute": "none"}}
    args = _cli(tmp_path, data, "--set", "model.layers=2")
    assert args.handler(args) == 1
    out = capsys.readouterr().out
    assert "no strategy could be simulated; " in out
    assert "that failed: " in out and "nic n1.nic3 down at 0.0001 s" in out


def test_a_jobs_scenario_is_no_search(tmp_path):
    job = {"model": dict(MODEL), "parallelism": {"tp": 1, "dp": 2},
           "training": {"micro_batch": 1, "global_batch": 2}}
    data = {"name": "two", "compute": {"gpu": "a100-80gb"},
            "cluster": {"preset": "switch", "gpus": 4},
            "jobs": [{"name": "a", **job}, {"name": "b", **job}]}
    args = _cli(tmp_path, data)
    with pytest.raises(ConfigError, match="search varies one job's strategy; this scenario "
                                          "has 2 jobs") as info:
        args.handler(args)
    assert info.value.key == "jobs"
