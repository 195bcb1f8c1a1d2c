"""Scenario keys of issue 15: faults, stragglers as distributions, jobs, goodput — parsing,
errors naming the key, reproducible resolved configurations, the report section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.disruptions import analyse, format_incidents
from distsim_gpu.scenarios.report import format_summary
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import ConfigError, SimulationError

MODEL = {"name": "gpt-tiny", "layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024,
         "vocab": 32000}


def base(**extra):
    data = {"name": "t", "cluster": {"preset": "dgx-a100", "nodes": 2, "fabric": "fat-tree"},
            "model": MODEL, "parallelism": {"tp": 4, "pp": 2, "dp": 2},
            "training": {"micro_batch": 1, "global_batch": 8},
            "compute": {"gpu": "a100-80gb"}}
    data.update(extra)
    return data


def test_a_nic_down_from_the_start_costs_time_and_the_resolved_config_reproduces_it():
    healthy = run_scenario(scenario_from_mapping(base()))
    scenario = scenario_from_mapping(base(faults=[{"target": "nic", "name": "n0.nic0"}]))
    faulted = run_scenario(scenario)
    assert faulted.iteration_time_s >= healthy.iteration_time_s
    again = scenario_from_mapping(scenario.resolved())
    assert run_scenario(again).iteration_time_s == faulted.iteration_time_s
    incidents = analyse(scenario, faulted)
    assert incidents is not None and "nic n0.nic0 down" in format_incidents(incidents)


def test_no_new_keys_no_section_and_the_same_resolved_config():
    scenario = scenario_from_mapping(base())
    assert analyse(scenario, run_scenario(scenario)) is None
    assert "faults" not in scenario.resolved() and "jobs" not in scenario.resolved()


@pytest.mark.parametrize(("extra", "key"), [
    ({"faults": [{"target": "link", "name": "leaf0 -> spine42"}]}, "faults[0].name"),
    ({"faults": [{"target": "nic", "name": "n0.nic0", "kind": "degraded",
                  "bandwidth_factor": 0}]}, "faults[0].bandwidth_factor"),
    ({"stragglers": {"jitter": {"sigma": "wide"}}}, "stragglers.jitter.sigma"),
    ({"stragglers": {"jitter": {"sigma": 0.1}, "n9.gpu0": 1.2}}, "stragglers.n9.gpu0"),
    ({"goodput": {"mtbf": {"gpu": "0 h"}}}, "goodput.mtbf.gpu"),
    ({"goodput": {"mtbf": {"rack": "100 h"}}}, "goodput.mtbf.rack"),
    ({"goodput": {"restart": "1 min"}}, "goodput.mtbf"),
])
def test_bad_specs_name_their_key(extra, key):
    with pytest.raises(ConfigError) as info:
        scenario_from_mapping(base(**extra), source="bad.yaml")
    assert info.value.key == key
    assert info.value.source == "bad.yaml"


def test_a_fault_after_the_run_and_a_lost_gpu_are_errors():
    late = base(faults=[{"target": "link", "name": "leaf0 -> n1.nic0", "at_s": 1e6}])
    with pytest.raises(ConfigError, match="after the run") as info:
        run_scenario(scenario_from_mapping(late))
    assert info.value.key == "faults[0].at_s"
    lost = base(faults=[{"target": "node", "name": "n1"}])
    with pytest.raises(SimulationError, match=r"n1\.gpu0"):
        run_scenario(scenario_from_mapping(lost))


def test_straggler_distributions_follow_the_seed():
    stragglers = {"jitter": {"distribution": "lognormal", "sigma": 0.05},
                  "slow_nodes": {"rate": 0.5, "factor": 1.3}, "attribute": False}
    one = scenario_from_mapping(base(stragglers=stragglers, simulation={"seed": 1}))
    same = scenario_from_mapping(base(stragglers=stragglers, simulation={"seed": 1}))
    other = scenario_from_mapping(base(stragglers=stragglers, simulation={"seed": 2}))
    assert one.stragglers == same.stragglers != other.stragglers
    assert len(one.stragglers) == 16
    assert run_scenario(one).iteration_time_s == run_scenario(same).iteration_time_s
    assert scenario_from_mapping(one.resolved()).stragglers == one.stragglers


def test_the_stragglers_cost_is_measured_beside_the_timed_faults():
    """The evened-out runs that price the stragglers keep a fault that strikes mid-run,
    as the run they explain did: without the stragglers is the faulted run alone."""
    healthy = run_scenario(scenario_from_mapping(base())).iteration_time_s
    fault = [{"target": "nic", "name": "n0.nic0", "kind": "degraded",
              "bandwidth_factor": 0.1, "at_s": healthy / 4}]
    faulted = run_scenario(scenario_from_mapping(base(faults=fault))).iteration_time_s
    scenario = scenario_from_mapping(base(faults=fault, stragglers={
        "jitter": {"distribution": "lognormal", "sigma": 0.05}}))
    incidents = analyse(scenario, run_scenario(scenario))
    assert incidents is not None and incidents.stragglers is not None
    assert incidents.stragglers.without_s == faulted > healthy


def test_a_straggler_written_by_gpu_is_priced_by_dimension_too():
    """A factor written for one GPU is the what-if users ask most; its cost comes in the
    incidents section as a drawn one's does (it had none), unless attribute is off."""
    plain = run_scenario(scenario_from_mapping(base())).iteration_time_s
    scenario = scenario_from_mapping(base(stragglers={"n1.gpu3": 1.5}))
    report = run_scenario(scenario)
    incidents = analyse(scenario, report)
    assert incidents is not None and incidents.stragglers is not None
    cost = incidents.stragglers
    assert cost.without_s == pytest.approx(plain, rel=1e-12)
    assert cost.total_s == pytest.approx(report.iteration_time_s - plain, rel=1e-9)
    assert cost.tp_lockstep_s > 0 and cost.slow_gpus == 1
    assert "through TP lockstep" in format_incidents(incidents)
    assert "stragglers: 1 GPU off nominal speed (the GPUs' factors 1-1.5x)" in format_incidents(
        incidents)
    quiet = scenario_from_mapping(base(stragglers={"n1.gpu3": 1.5, "attribute": False}))
    silent = analyse(quiet, run_scenario(quiet))
    assert silent is None or silent.stragglers is None
    even = scenario_from_mapping(base(stragglers={"n1.gpu3": 1.0}))
    assert analyse(even, run_scenario(even)) is None


def test_a_jobs_scenario_is_no_chakra_export(tmp_path, capsys):
    path = tmp_path / "two.yaml"
    path.write_text(json.dumps(jobs_mapping()))
    assert main(["trace", "export-chakra", str(path), "--out", str(tmp_path / "et")]) == 2
    err = capsys.readouterr().err
    assert "jobs: trace export-chakra writes one job's ranks; this scenario has 2 jobs" in err
    assert not (tmp_path / "et").exists()


def jobs_mapping(placement_b="packed", **extra):
    job = {"model": MODEL, "parallelism": {"tp": 8, "dp": 2},
           "training": {"micro_batch": 1, "global_batch": 4}}
    data = {"name": "two", "compute": {"gpu": "a100-80gb"},
            "cluster": {"preset": "dgx-a100", "nodes": 4,
                        "fabric": {"kind": "fat-tree", "nics_per_leaf": 16,
                                   "oversubscription": 2}},
            "jobs": [{"name": "a", **job}, {"name": "b", **job, "placement": placement_b}]}
    data.update(extra)
    return data


def test_jobs_scenario_reports_each_job_and_reproduces():
    scenario = scenario_from_mapping(jobs_mapping())
    assert [name for name, _ in scenario.jobs] == ["a", "b"]
    assert scenario.jobs[1][1].topology.gpus[0] == "n2.gpu0"
    report = run_scenario(scenario)
    incidents = analyse(scenario, report)
    assert incidents is not None and incidents.jobs is not None
    assert [j.slowdown for j in incidents.jobs.jobs] == pytest.approx([1.0, 1.0], rel=1e-12)
    text = format_incidents(incidents)
    assert "a: 16 GPUs" in text and "slowdown 1.000x" in text
    again = scenario_from_mapping(scenario.resolved())
    assert [job.topology.gpus for _, job in again.jobs] == [
        job.topology.gpus for _, job in scenario.jobs]
    # The summary names each job's model and strategy, and whose figures it holds.
    summary = format_summary(report)
    first = scenario.jobs[0][1]
    assert "2 share the cluster; the figures below are job a's" in summary
    # The cluster line counts the cluster's GPUs (4 DGX nodes), not the first job's 16.
    assert ": 32 GPUs on 4 node(s)" in summary and report.num_gpus == 16
    assert "None" not in summary
    for name, job in scenario.jobs:
        assert f"job {name:<8} {job.model.name}:" in summary
    assert f"tp {first.parallel.tp} · pp {first.parallel.pp}" in summary


@pytest.mark.parametrize(("data", "key"), [
    (jobs_mapping(placement_b="random"), "jobs[1].placement"),
    (jobs_mapping(model=MODEL), "model"),
    ({**jobs_mapping(), "jobs": []}, "jobs"),
    ({**jobs_mapping(), "jobs": [{"name": "a", "model": MODEL,
                                  "parallelism": {"tp": 8, "dp": 8}}]}, "jobs[0]"),
    ({**jobs_mapping(), "jobs": [{"name": "a", "model": MODEL, "parallelism": {"tp": 8},
                                  "training": {"micro_batch": 0}}]},
     "jobs[0].training.micro_batch"),
    ({**jobs_mapping(), "jobs": [{**job, "name": "a"} for job in jobs_mapping()["jobs"]]},
     "jobs[1].name"),
])
def test_bad_jobs_name_their_key(data, key):
    with pytest.raises(ConfigError) as info:
        scenario_from_mapping(data)
    assert info.value.key == key


def test_a_job_name_given_twice_by_set_is_blamed_on_the_set(capsys):
    example = FAULT_EXAMPLES / "two-jobs-oversubscribed.yaml"
    assert main(["run", str(example), "--set", "jobs[1].name=a"]) != 0
    assert ("--set: jobs[1].name: job name 'a' is also jobs[0]'s"
            in capsys.readouterr().err)


def test_cli_run_prints_and_writes_the_section(tmp_path, capsys):
    path = tmp_path / "f.yaml"
    path.write_text(json.dumps(base(faults=[{"target": "nic", "name": "n1.nic3"}],
                                    goodput={"mtbf": {"gpu": "50000 h"}})))
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "faults: nic n1.nic3 down" in out and "Young" in out
    assert main(["run", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["incidents"]["faults"] == ["nic n1.nic3 down"]
    assert data["incidents"]["goodput"]["young_interval_s"] > 0
    out_dir = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out_dir), "--no-trace"]) == 0
    capsys.readouterr()
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["incidents"] == data["incidents"]
    assert summary["iteration_time_s"] == data["iteration_time_s"]


FAULT_EXAMPLES = Path(__file__).resolve().parents[2] / "scenarios" / "examples" / "faults"


def test_the_fault_examples_load():
    nic = load_scenario(FAULT_EXAMPLES / "gpt3-one-nic-down.yaml")
    assert "n5.nic3" not in {d.name for d in nic.topology.devices()}
    jobs = load_scenario(FAULT_EXAMPLES / "two-jobs-oversubscribed.yaml")
    assert [len(job.topology.gpus) for _, job in jobs.jobs] == [64, 64]


def test_straggler_distributions_by_set_and_not_with_jobs():
    by_set = scenario_from_mapping(base(), overrides=[("stragglers.jitter.sigma", 0.05),
                                                      ("simulation.seed", 4)])
    written = scenario_from_mapping(base(stragglers={"jitter": {"sigma": 0.05}},
                                         simulation={"seed": 4}))
    assert by_set.stragglers == written.stragglers and len(by_set.stragglers) == 16
    with pytest.raises(ConfigError, match="not modelled") as info:
        scenario_from_mapping(jobs_mapping(stragglers={"jitter": {"sigma": 0.1}}))
    assert info.value.key == "stragglers"


def test_goodput_with_storage_nodes_beside_a_job():
    data = jobs_mapping()
    data["jobs"] = data["jobs"][:1]
    data["goodput"] = {"mtbf": {"gpu": "50000 h"}, "storage_nodes": ["n3"],
                       "storage_bandwidth": "10 TB/s"}
    scenario = scenario_from_mapping(data)
    incidents = analyse(scenario, run_scenario(scenario))
    params = scenario.model.total_params()
    nic_s = params * 14 / (8 * 25e9)  # the storage node's eight 200 Gb/s NICs
    assert incidents.goodput.checkpoint_s == pytest.approx(nic_s, rel=0.1)
    data["goodput"]["storage_nodes"] = [0]
    scenario = scenario_from_mapping(data)
    with pytest.raises(ConfigError, match="runs a job") as info:
        analyse(scenario, run_scenario(scenario))
    assert info.value.key == "goodput.storage_nodes[0]"
    # A node the second job holds is no storage node either (packed: job b on n2, n3).
    both = jobs_mapping(goodput={"mtbf": {"gpu": "50000 h"}, "storage_nodes": ["n3"],
                                 "storage_bandwidth": "10 TB/s"})
    scenario = scenario_from_mapping(both)
    with pytest.raises(ConfigError, match="node 3 runs a job"):
        analyse(scenario, run_scenario(scenario))
    data["goodput"]["storage_nodes"] = "n3"
    with pytest.raises(ConfigError, match="list"):
        scenario_from_mapping(data)


@pytest.mark.parametrize(("placement", "slowdown", "shared"), [("packed", 1.0, 0),
                                                               ("spread", 1.302, 64)])
def test_the_two_jobs_example_shows_what_its_comment_says(capsys, placement, slowdown,
                                                          shared):
    """The comment's numbers: packed never meets, spread shares 64 uplinks (4:1) and both
    jobs slow by 30.2 %."""
    from distsim_gpu.scenarios.cli.main import main

    path = FAULT_EXAMPLES / "two-jobs-oversubscribed.yaml"
    text = path.read_text()
    assert main(["run", str(path), "--json", "--set", f"jobs[0].placement={placement}",
                 "--set", f"jobs[1].placement={placement}"]) == 0
    jobs = json.loads(capsys.readouterr().out)["incidents"]["jobs"]
    assert jobs["shared_links"] == shared
    for job in jobs["jobs"]:
        assert job["slowdown"] == pytest.approx(slowdown, abs=5e-4)
        assert job["alone_iteration_s"] == pytest.approx(0.81205, abs=5e-5)
    assert f"{slowdown:.3f}x" in text  # the comment quotes it


def test_a_multi_job_summary_prints_each_jobs_model_and_strategy(capsys):
    from distsim_gpu.scenarios.cli.main import main

    path = FAULT_EXAMPLES / "two-jobs-oversubscribed.yaml"
    assert main(["run", str(path), "--set", "jobs[1].parallelism.tp=4",
                 "--set", "jobs[1].parallelism.dp=16", "--set", "jobs[1].model.layers=16"]) == 0
    out = capsys.readouterr().out
    assert "None" not in out and "?" not in out.split("iteration")[0]
    assert "job a        gpt3-6.7b: 32 layers" in out
    assert "job b        gpt3-6.7b: 16 layers" in out
    assert "tp 8 · pp 1 · dp 8" in out and "tp 4 · pp 1 · dp 16" in out
