"""Crashed and concurrent sweeps (issue 13): workers die with their parent, ``--out`` is
claimed under a lock, a different sweep into a running one's folder is refused, identical
sweeps share the points (a point another holds is left to it and its result taken)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from distsim_gpu.scenarios.study.sweep import run_sweep
from distsim_gpu.simcore.errors import ConfigError

GRID = "cluster.link_bandwidth=50 GB/s,100 GB/s"


@pytest.fixture
def scenario(tmp_path: Path, tiny, write_scenario) -> Path:
    # The tiny scenario (tests/conftest.py) with link figures for GRID to vary.
    return write_scenario(tmp_path / "tiny.yaml", tiny(cluster={
        "link_bandwidth": "100 GB/s", "link_latency": "1 us"}))


def _hold(path: Path, *, exclusive: bool = True) -> object:
    """Hold a lock on ``path`` as another sweep would; returns the open file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "ab")  # noqa: SIM115
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    return handle


def test_different_sweep_into_a_running_ones_folder_is_refused(scenario, tmp_path):
    out = tmp_path / "out"
    run_sweep(scenario, [GRID], out_dir=out, workers=1, progress=False)
    held = _hold(out / ".sweep.running", exclusive=False)  # a sweep running there
    try:
        with pytest.raises(ConfigError, match=r"a different sweep is running into it: "
                                              r"--grid cluster\.link_bandwidth"):
            run_sweep(scenario, ["cluster.link_bandwidth=50 GB/s,400 GB/s"], out_dir=out,
                      workers=1, progress=False)
    finally:
        held.close()
    stored = json.loads((out / "sweep.json").read_text())
    assert stored["grids"][0][1] == ["50 GB/s", "100 GB/s"]  # the running one's, untouched


def test_identical_sweeps_share_the_points(scenario, tmp_path):
    out = tmp_path / "out"
    first = run_sweep(scenario, [GRID], out_dir=out, workers=1, progress=False)
    theirs, mine = (p.id for p in first.points)
    for point in first.points:  # start again, as two sweeps into a new folder would
        (out / "points" / point.id / "summary.json").unlink()
    stored = {}
    claim = _hold(out / "points" / theirs / ".claim")  # the other sweep runs this one

    def other_sweep_finishes():
        stored[theirs] = first.points[0].summary
        (out / "points" / theirs / "summary.json").write_text(json.dumps(stored[theirs]))
        claim.close()

    timer = threading.Timer(0.5, other_sweep_finishes)
    timer.start()
    second = run_sweep(scenario, [GRID], out_dir=out, workers=1, progress=False)
    timer.join()
    # Ours ran here; theirs was left to the other sweep and its result taken.
    assert second.ran == 1 and second.reused == 1
    by_id = {p.id: p for p in second.points}
    assert by_id[theirs].summary == stored[theirs]
    assert by_id[mine].summary["iteration_time_s"] == first.points[1].summary[
        "iteration_time_s"]


def test_a_point_whose_claimer_died_without_a_result_runs_here(scenario, tmp_path):
    out = tmp_path / "out"
    first = run_sweep(scenario, [GRID], out_dir=out, workers=1, progress=False)
    for point in first.points:
        (out / "points" / point.id / "summary.json").unlink()
    claim = _hold(out / "points" / first.points[0].id / ".claim")
    timer = threading.Timer(0.3, claim.close)  # (the other sweep is killed: no result)
    timer.start()
    second = run_sweep(scenario, [GRID], out_dir=out, workers=1, progress=False)
    timer.join()
    assert second.ran == 2 and second.reused == 0 and second.failed == 0


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:  # the process itself is gone
        return found
    for task in tasks:
        try:
            text = (task / "children").read_text()
        except FileNotFoundError:  # a thread that ended since the listing
            continue
        found.update(int(c) for c in text.split())
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie has exited (its reaper may be slow)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_pool_workers_die_with_a_killed_sweep(scenario, tmp_path):
    # Slow points (a few seconds each) on two workers; SIGKILL the sweep mid-run.
    code = (f"from distsim_gpu.scenarios.study.sweep import run_sweep\n"
            f"run_sweep({str(scenario)!r}, ['training.global_batch=65536,65544,65552'], "
            f"out_dir={str(tmp_path / 'out')!r}, workers=2, progress=False)\n")
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        workers: set[int] = set()
        while len(workers) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.05)
            workers = {c for c in _children(parent.pid) if _alive(c)}
        assert len(workers) >= 2, "the pool did not start"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 2.5
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(w) for w in workers)
    finally:
        if parent.poll() is None:
            parent.kill()
