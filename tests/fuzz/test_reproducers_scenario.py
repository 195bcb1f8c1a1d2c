"""Hostile values in the newer scenario sections end in one clear error.

Jobs (a parallelism of the wrong type, a null name), faults (a node named ``n²`` or with
5,000 digits), MoE routing (a histogram whose sum overflows), stragglers (factors past
1,000x), per-operator sharding (a split past the weight's columns) and a cluster GPU that
distsim has no NVLink figure for: each exits 2 with a ``distsim: error:`` line naming the
file and the key, and no traceback.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from distsim_gpu.workloads.job.stragglers import MAX_FACTOR, MAX_JITTER_SIGMA

EXAMPLES = Path(__file__).parents[2] / "scenarios" / "examples"


def _example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def _write(tmp_path: Path, doc: dict) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, width=10**6))
    return str(path)


def _two_jobs() -> dict:
    return _example("faults/two-jobs-oversubscribed.yaml")


@pytest.mark.parametrize(("value", "says"), [
    ([1], "got [1]"), ({"a": 1}, "got {'a': 1}"), ("8", "got '8'"), (1.5, "got 1.5"),
    (True, "got True")])
def test_a_job_parallelism_of_the_wrong_type(rejects, tmp_path, value, says):
    doc = _two_jobs()
    doc["jobs"][0]["parallelism"]["tp"] = value
    err = rejects("run", _write(tmp_path, doc), names="bad.yaml:")
    assert "jobs[0].parallelism.tp: must be a whole number >= 1" in err and says in err


@pytest.mark.parametrize("name", [None, "", "   ", 7, ["a"], "x" * 101, "a\nb"])
def test_a_job_name_must_be_text(rejects, tmp_path, name):
    doc = _two_jobs()
    doc["jobs"][0]["name"] = name
    err = rejects("run", _write(tmp_path, doc), names="jobs[0].name")
    assert "printable text of 1 to 100 characters" in err and "bad.yaml" in err


@pytest.mark.parametrize("name", ["n²", "n" + "9" * 5000, "n-1", "n1.5", "n٣"])
def test_a_node_fault_with_a_name_that_is_no_index(rejects, tmp_path, name):
    doc = _example("faults/gpt3-one-nic-down.yaml")
    doc["faults"] = [{"target": "node", "name": name, "kind": "down"}]
    err = rejects("run", _write(tmp_path, doc), names="bad.yaml:")
    assert "faults[0].name: no node" in err and len(err) < 400


def test_goodput_storage_nodes_that_are_no_index(rejects, tmp_path):
    doc = _example("quickstart.yaml")
    doc["goodput"] = {"mtbf": {"gpu": "50000 h"}, "storage_nodes": ["n²"]}
    assert "not a node" in rejects("run", _write(tmp_path, doc),
                                   names="goodput.storage_nodes[0]")


def test_a_moe_histogram_whose_sum_overflows(rejects, tmp_path):
    doc = _example("moe-as-it-runs-64-h100.yaml")
    experts = doc["model"]["experts"]
    doc["model"]["moe"]["routing"] = {"histogram": [1e308] * experts}
    err = rejects("run", _write(tmp_path, doc), names="model.moe.routing.histogram")
    assert "sum past a double's range" in err
    doc["model"]["moe"]["routing"] = {"histogram": [1e300] * experts}  # relative: fine
    from distsim_gpu.scenarios.scenario import load_scenario

    assert load_scenario(_write(tmp_path, doc)).spec.model.experts == experts


@pytest.mark.parametrize(("stragglers", "key"), [
    ({"n0.gpu0": 1e308}, "stragglers.n0.gpu0"),
    ({"n0.gpu0": MAX_FACTOR * 1.001}, "stragglers.n0.gpu0"),
    ({"slow_nodes": {"rate": 0.5, "factor": 1e308}}, "stragglers.slow_nodes.factor"),
    ({"n0.gpu0": 2e3, "jitter": {"sigma": 0.05}}, "stragglers.n0.gpu0"),
    ({"jitter": {"sigma": MAX_JITTER_SIGMA * 2}}, "stragglers.jitter.sigma"),
])
def test_straggler_factors_have_an_upper_bound(rejects, tmp_path, stragglers, key):
    doc = _example("quickstart.yaml")
    doc["stragglers"] = stragglers
    err = rejects("run", _write(tmp_path, doc), names="bad.yaml:")
    assert key in err and "must be a number in" in err


def test_a_straggler_at_the_bound_still_runs(capsys, tmp_path):
    from distsim_gpu.scenarios.cli.main import main

    doc = _example("quickstart.yaml")
    doc["stragglers"] = {"n0.gpu0": MAX_FACTOR}
    assert main(["run", _write(tmp_path, doc), "--json"]) == 0, capsys.readouterr().err


def test_a_split_past_the_weight_columns(rejects, tmp_path):
    doc = _example("osdp-gpt3-6.7b-32-a100.yaml")
    doc["parallelism"]["operator_sharding"]["split"] = {"mlp_fc1": 1_000_000_000}
    err = rejects("run", _write(tmp_path, doc),
                  names="parallelism.operator_sharding.split.mlp_fc1")
    # gpt3-6.7b: ffn_hidden 4 x 4096 = 16,384 columns of fc1 at tp 1
    assert "16,384 output columns" in err
    doc["parallelism"]["operator_sharding"]["split"] = {"mlp_fc1": 16_385}
    rejects("run", _write(tmp_path, doc), names="split.mlp_fc1")


def test_a_split_within_the_weight_runs(tmp_path):
    from distsim_gpu.scenarios.scenario import load_scenario

    doc = _example("osdp-gpt3-6.7b-32-a100.yaml")
    doc["parallelism"]["operator_sharding"]["split"] = {"mlp_fc1": 16_384}
    assert load_scenario(_write(tmp_path, doc)).spec.parallel.operator_sharding.split == {
        "mlp_fc1": 16_384}


def test_an_unknown_cluster_gpu_has_no_silent_nvlink_figure(rejects, capsys):
    from distsim_gpu.scenarios.cli.main import main

    err = rejects("nccl-tests", "--cluster", "dgx-a100", "--set", "gpu.model=zz-9000",
                  "-b", "1M", "-e", "1M", names="dgx-a100: gpu.model")
    assert "'zz-9000'" in err and "comm.link_efficiency.nvlink" in err
    # Said explicitly, it runs; and a cluster without NVLink does not need the figure.
    assert main(["nccl-tests", "--cluster", "dgx-a100", "--set", "gpu.model=zz-9000",
                 "--set", "comm.link_efficiency.nvlink=0.8", "-b", "1M", "-e", "1M"]) == 0
    assert main(["nccl-tests", "--cluster", "pcie-8gpu", "-b", "1M", "-e", "1M"]) == 0
    capsys.readouterr()


def test_a_scenario_takes_nvlink_from_its_compute_gpu(tmp_path):
    # (the cluster's GPU name is a label there: compute.gpu says the generation)
    from distsim_gpu.scenarios.scenario import load_scenario

    doc = copy.deepcopy(_example("quickstart.yaml"))
    doc["cluster"]["gpu"] = {"model": "zz-9000"}
    spec = load_scenario(_write(tmp_path, doc)).spec
    assert spec.comm.link_efficiency["nvlink"] == 0.78  # ampere: compute.gpu a100


@pytest.mark.parametrize("gpu", [["n0.gpu0"], {"a": 1}, 3, None])
def test_a_job_placement_entry_that_is_no_gpu_name(rejects, tmp_path, gpu):
    doc = _two_jobs()
    doc["jobs"][1]["placement"] = [gpu] * 64
    err = rejects("run", _write(tmp_path, doc), names="jobs[1].placement[0]")
    assert "no GPU" in err and "bad.yaml" in err
