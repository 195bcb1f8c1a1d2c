"""docs/dask.md followed with a scheduler and one worker in this process (Dask's
LocalCluster): search and validate runs give on the Dask cluster what they give locally,
and a scheduler that is not there is a clear error."""

from __future__ import annotations

import argparse
import shlex
import threading
from pathlib import Path

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.cli.search import add_parser
from distsim_gpu.scenarios.fit.validate_runs import validate_runs
from distsim_gpu.scenarios.scenario import scenario_from_mapping
from distsim_gpu.scenarios.study.search import search_strategies
from distsim_gpu.scenarios.study.sweep import run_sweep
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.pool import Workers

from tests.scenarios.fit.test_validate_runs import _write
from tests.scenarios.study.test_search import NARROW, mapping

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def scheduler():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  protocol="tcp://", host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def test_search_on_dask_finds_what_local_processes_find(scheduler) -> None:
    scenario = scenario_from_mapping(mapping("600 GB/s"))
    local = search_strategies(scenario, workers=1, space=NARROW, top=3)
    remote = search_strategies(scenario, workers=Workers(scheduler=scheduler), space=NARROW,
                               top=3)
    assert [(r.strategy.label(), r.iteration_time_s) for r in remote.top] == [
        (r.strategy.label(), r.iteration_time_s) for r in local.top]


def test_validate_runs_on_dask_gives_the_local_rows(scheduler, tmp_path: Path) -> None:
    table, map_path = _write(tmp_path)
    local = validate_runs(table, map_path, workers=1)
    remote = validate_runs(table, map_path, workers=Workers(scheduler=scheduler))
    assert [r.predicted_s for r in remote.results] == [r.predicted_s for r in local.results]


def test_the_cli_takes_the_scheduler(scheduler, tmp_path: Path) -> None:
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(mapping("600 GB/s")))
    parser = argparse.ArgumentParser(prog="distsim")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["search", str(path), "--top", "2", "-q", "--out",
                              str(tmp_path / "out"), "--scheduler", scheduler])
    assert args.handler(args) == 0
    assert (tmp_path / "out" / "results.csv").is_file()


def test_no_scheduler_there_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("distsim_gpu.simcore.pool.DASK_CONNECT_S", 1.0)
    table, map_path = _write(tmp_path)
    with pytest.raises(ConfigError, match=r"--scheduler: cannot connect to the Dask scheduler"):
        validate_runs(table, map_path, workers=Workers(scheduler="tcp://127.0.0.1:9"))


def _docs_sweep_command() -> list[str]:
    """docs/dask.md's `distsim sweep` command, as argv after `distsim`."""
    text = (Path(__file__).parents[3] / "docs" / "dask.md").read_text(encoding="utf-8")
    lines = text.replace("\\\n", " ").splitlines()
    command = next(line for line in lines if line.startswith("distsim sweep "))
    return shlex.split(command)[1:]


def test_the_pages_sweep_command_runs_on_the_scheduler(scheduler, tmp_path: Path,
                                                         monkeypatch) -> None:
    """The page's sweep, as written (its scenario, grid and --scheduler), on a scheduler:
    every point valid and run."""
    argv = _docs_sweep_command()
    argv[argv.index("--scheduler") + 1] = scheduler
    argv[argv.index("--out") + 1] = str(tmp_path / "sweep-tp")
    monkeypatch.chdir(Path(__file__).parents[3])
    assert main([*argv, "-q"]) == 0
    rows = (tmp_path / "sweep-tp" / "results.csv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + 3 and all(",ok," in row for row in rows[1:])


def test_a_sweep_on_a_scheduler_without_workers_is_a_clear_error(tmp_path: Path) -> None:
    """As search says: a sweep's tasks would wait forever on a scheduler with no workers."""
    path = tmp_path / "s.yaml"
    path.write_text("cluster: {preset: switch, gpus: 2}\nmodel: {layers: 2, hidden: 256, "
                    "heads: 4, seq_len: 128, vocab: 1000}\nparallelism: {dp: 2}\n"
                    "training: {micro_batch: 1, global_batch: 2}\ncompute: {gpu: a100-80gb}\n",
                    encoding="utf-8")
    outcome: list[BaseException | None] = []

    def sweep(address: str) -> None:
        try:
            run_sweep(path, ["model.layers=2,4"], out_dir=tmp_path / "out",
                      workers=Workers(scheduler=address), progress=False)
            outcome.append(None)
        except BaseException as error:  # (handed to the test's thread)
            outcome.append(error)

    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=":0") as cluster:
        thread = threading.Thread(target=sweep, args=(cluster.scheduler_address,),
                                  daemon=True)
        thread.start()
        thread.join(60)
    assert outcome, "the sweep still waits for workers after 60 s"
    assert isinstance(outcome[0], ConfigError)
    assert "the Dask scheduler has no workers" in str(outcome[0])
