"""``distsim compare``: deltas are exactly B − A of the two reports, a slower link shows as
more communication, bad input is a clear error, and --json is one JSON object."""

from __future__ import annotations

import argparse
import json

import pytest
from distsim_gpu.scenarios.cli.compare import add_parser
from distsim_gpu.scenarios.study.compare import compare_scenarios, format_comparison
from distsim_gpu.simcore.errors import ConfigError, DistsimError


@pytest.fixture(scope="module")
def paths(tmp_path_factory, tiny, write_scenario):
    root = tmp_path_factory.mktemp("compare")
    fast = write_scenario(root / "fast.yaml", tiny(
        name="fast", cluster={"preset": "switch", "gpus": 8, "link_bandwidth": "100 GB/s"}))
    slow = write_scenario(root / "slow.yaml", tiny(
        name="slow", cluster={"preset": "switch", "gpus": 8, "link_bandwidth": "2 GB/s"}))
    return [str(fast), str(slow)]


@pytest.fixture(scope="module")
def comparison(paths):
    return compare_scenarios(paths)


def test_slower_links_mean_more_communication_and_a_longer_iteration(comparison):
    fast, slow = comparison.reports
    assert slow.iteration_time_s > fast.iteration_time_s
    metrics = {row["metric"]: row for row in comparison.metrics()}
    assert metrics["iteration_time_s"]["delta"][1] > 0
    assert metrics["samples_per_s"]["delta"][1] < 0
    assert metrics["mfu"]["delta"][1] < 0
    everyone = comparison.breakdown()[-1]
    assert everyone["stage"] == "all"
    assert everyone["times"]["communication_s"]["delta"][1] > 0
    assert everyone["times"]["exposed_communication_s"]["delta"][1] > 0
    path = comparison.critical_path()
    communication = sum(path[k]["delta"][1] for k in ("tp comm", "pp transfer", "dp comm"))
    assert communication > 0


def test_deltas_are_exactly_b_minus_a(comparison):
    fast, slow = comparison.reports
    metrics = {row["metric"]: row for row in comparison.metrics()}
    for key in ("iteration_time_s", "samples_per_s", "tokens_per_s", "model_tflops_per_gpu",
                "mfu"):
        a, b = getattr(fast, key), getattr(slow, key)
        row = metrics[key]
        assert row["values"] == [a, b]
        assert row["delta"] == [0.0, b - a]
        assert row["delta_percent"][1] == (b - a) / a * 100
    for row in comparison.breakdown()[:-1]:
        stage = row["stage"]
        for field, entry in row["times"].items():
            a = [getattr(g, field) for g in fast.per_gpu if g.stage == stage]
            b = [getattr(g, field) for g in slow.per_gpu if g.stage == stage]
            mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
            assert entry["values"] == [mean_a, mean_b]
            assert entry["delta"][1] == mean_b - mean_a


def test_links_name_their_kind_and_traffic(comparison):
    fast_links, slow_links = comparison.links()
    assert slow_links
    for link in slow_links:
        assert link["kind"]
        assert set(link["bytes_by_traffic"]) <= {"tp", "pp", "dp", "ep"}
        assert 0 < link["utilisation"] <= 1 + 1e-9
    # The same bytes over a slower link: a larger share of its capacity.
    assert slow_links[0]["utilisation"] > fast_links[0]["utilisation"]


def test_table_shows_every_scenario_and_the_deltas(comparison):
    text = format_comparison(comparison)
    for part in ("fast", "slow", "iteration time", "MFU", "stage 0 compute",
                 "all GPUs communication", "Critical path", "Busiest links", "%"):
        assert part in text, part
    # Each later scenario's delta has a column of its own: the values stay aligned.
    rows = [line for line in text.splitlines() if line.lstrip().startswith(
        ("iteration time", "MFU", "samples/s"))]  # (one table)
    ends = {line.index(" [") for line in rows if " [" in line}
    assert len(rows) == 3 and len(ends) == 1
    # The runs' notes are the comparison's too.
    notes = {str(n) for r in comparison.reports for n in r.notes}
    assert notes and all(f"note: {n}" in text for n in notes)


def test_two_scenarios_of_one_name_are_told_apart_by_path(paths, tmp_path, tiny,
                                                           write_scenario):
    twin = write_scenario(tmp_path / "twin.yaml", tiny(
        name="fast", cluster={"preset": "switch", "gpus": 8, "link_bandwidth": "50 GB/s"}))
    text = format_comparison(compare_scenarios([paths[0], str(twin)]))
    assert f"fast ({paths[0]}) vs fast ({twin})" in text.splitlines()[0]


def cli(argv):
    parser = argparse.ArgumentParser(prog="distsim")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_json_is_one_object(paths, capsys):
    assert cli(["compare", *paths, "--json", "--set", "simulation.seed=1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in data["scenarios"]] == ["fast", "slow"]
    assert all(isinstance(s["notes"], list) for s in data["scenarios"])
    assert data["baseline"] == "fast"
    metrics = {row["metric"]: row for row in data["metrics"]}
    assert metrics["iteration_time_s"]["delta"][1] > 0
    assert data["top_links"][1]["links"]


def test_a_bad_path_is_a_clear_error(paths, tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        compare_scenarios([paths[0], str(missing)])
    assert "nope.yaml" in str(caught.value)
    assert "no scenario file" in str(caught.value)


def test_one_scenario_or_a_bad_override_is_refused(paths):
    with pytest.raises(ConfigError, match="at least two"):
        compare_scenarios(paths[:1])
    with pytest.raises(DistsimError, match="parallelism"):
        compare_scenarios(paths, ["parallelism.tpp=2"])


def test_an_override_one_scenario_cannot_take_names_that_scenario(tmp_path, paths, tiny,
                                                                  write_scenario):
    """A --set that suits the first scenario and breaks the second says which it broke."""
    small = write_scenario(tmp_path / "small.yaml", tiny(
        name="small", cluster={"preset": "switch", "gpus": 4},
        parallelism={"tp": 1, "pp": 1, "dp": 4}))
    with pytest.raises(ConfigError) as caught:
        compare_scenarios([paths[0], str(small)], ["training.global_batch=6"])
    assert str(caught.value).startswith(f"--set on {small}: training.global_batch")


def test_compare_counts_the_scenarios_on_a_terminal_and_is_quiet_otherwise(
        paths, monkeypatch, capsys):
    """On a terminal the progress line counts the scenarios run; with -q nothing is drawn."""
    import io

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
    parser = argparse.ArgumentParser(prog="distsim")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["compare", *map(str, paths), "--json"])
    assert args.handler(args) == 0
    assert drawn == [(k + 1, len(paths), "scenarios") for k in range(len(paths))]
    drawn.clear()
    args = parser.parse_args(["compare", *map(str, paths), "--json", "-q"])
    assert args.handler(args) == 0
    assert drawn == []
