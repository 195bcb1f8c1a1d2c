"""Data loading: when the GPUs wait for the loader, and by how much (closed forms)."""

from __future__ import annotations

import json

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.errors import DistsimError
from distsim_gpu.workloads.strategy.data_loading import DataLoader, data_loader_from_mapping
from hypothesis import given
from hypothesis import strategies as st


@given(st.floats(0.0, 10.0), st.floats(0.0, 1.0), st.integers(1, 4096), st.integers(0, 64))
def test_an_iteration_is_training_or_loading_whichever_is_longer(training_s, sample_s,
                                                                 samples, workers):
    loader = DataLoader(sample_s, workers)
    if workers == 0:  # in the training process: in series
        assert loader.iteration_s(training_s, samples) == pytest.approx(
            training_s + samples * sample_s)
    else:  # prefetching workers: beside it
        assert loader.iteration_s(training_s, samples) == pytest.approx(
            max(training_s, samples * sample_s / workers))
    assert loader.iteration_s(training_s, samples) >= training_s


def test_the_mapping_reads_units_and_defaults_to_one_worker():
    assert data_loader_from_mapping({"sample_time": "4 ms"}) == DataLoader(0.004, 1)
    assert data_loader_from_mapping({"sample_time": 0.01, "workers": 0}) == DataLoader(0.01, 0)


@pytest.mark.parametrize(("loader", "message"), [
    ({"workers": 4}, "training.data_loader: needs sample_time"),
    ({"sample_time": "-2 ms"}, "training.data_loader.sample_time"),
    ({"sample_time": "2 ms", "workers": -1}, "training.data_loader.workers: must be a whole"),
    ({"sample_time": "2 ms", "worker": 2}, "did you mean 'workers'"),
    ("fast", "training.data_loader: expected a mapping, got str")])
def test_a_bad_loader_names_its_key(tmp_path, tiny, write_scenario, loader, message):
    path = write_scenario(tmp_path / "s.yaml", tiny(training={"data_loader": loader}))
    with pytest.raises(DistsimError, match=message):
        load_scenario(path)


def _run(tmp_path, tiny, write_scenario, loader):
    training = {"micro_batch": 1, "global_batch": 8}
    if loader is not None:
        training["data_loader"] = loader
    path = write_scenario(tmp_path / "s.yaml", tiny(training=training))
    return run_scenario(load_scenario(path))


def test_a_slow_loader_sets_the_iteration_and_the_gpus_idle_for_it(tmp_path, tiny,
                                                                   write_scenario):
    plain = _run(tmp_path, tiny, write_scenario, None)
    # dp 2, global batch 8: each data-parallel rank loads 4 samples per iteration.
    sample_s = plain.iteration_time_s  # 4 samples on 2 workers: twice the training
    slow = _run(tmp_path, tiny, write_scenario, {"sample_time": sample_s, "workers": 2})
    assert slow.iteration_time_s == pytest.approx(2 * plain.iteration_time_s)
    assert slow.data_loading_s == pytest.approx(2 * plain.iteration_time_s)
    wait_s = slow.iteration_time_s - plain.iteration_time_s
    for before, after in zip(plain.per_gpu, slow.per_gpu):
        assert after.idle_s == pytest.approx(before.idle_s + wait_s)
        assert (after.compute_s, after.bubble_s) == (before.compute_s, before.bubble_s)
    last = slow.critical_path[-1]
    assert (last.kind, last.start_s, last.end_s) == (
        "data loading", pytest.approx(plain.iteration_time_s),
        pytest.approx(slow.iteration_time_s))
    assert sum(e.duration_s for e in slow.critical_path) == pytest.approx(
        slow.iteration_time_s)


def test_a_fast_loader_is_hidden_and_reported(tmp_path, tiny, write_scenario):
    plain = _run(tmp_path, tiny, write_scenario, None)
    fast = _run(tmp_path, tiny, write_scenario, {"sample_time": "1 us", "workers": 4})
    assert fast.iteration_time_s == plain.iteration_time_s
    assert fast.data_loading_s == pytest.approx(1e-6)
    assert fast.critical_path[-1].kind != "data loading"


def test_the_cli_says_whether_the_gpus_wait_and_json_carries_it(tmp_path, tiny,
                                                                write_scenario, capsys):
    training = {"micro_batch": 1, "global_batch": 8,
                "data_loader": {"sample_time": "1 s", "workers": 0}}
    path = write_scenario(tmp_path / "s.yaml", tiny(training=training))
    assert main(["run", str(path)]) == 0
    text = capsys.readouterr().out
    assert "data loading 4 s per iteration (in the training process): the GPUs wait 4 s" in text
    assert main(["run", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["data_loading_s"] == pytest.approx(4.0)
    assert data["config"]["training"]["data_loader"] == {"sample_time": 1.0, "workers": 0}


def test_the_resolved_scenario_reloads_with_its_loader(tmp_path, tiny, write_scenario):
    training = {"micro_batch": 1, "global_batch": 8,
                "data_loader": {"sample_time": "3 ms", "workers": 2}}
    first = load_scenario(write_scenario(tmp_path / "s.yaml", tiny(training=training)))
    again = load_scenario(write_scenario(tmp_path / "again.yaml", first.resolved()))
    assert again.training.data_loader == DataLoader(0.003, 2)
    plain = load_scenario(write_scenario(tmp_path / "plain.yaml", tiny()))
    assert "data_loader" not in plain.resolved()["training"]
