"""Crashed and concurrent sweeps (issue 13): workers die with their parent, ``--out`` is
claimed under a lock, a different sweep into a running one's folder is refused, an
identical one waits and reuses its points."""

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

SCENARIO = """\
cluster: {preset: switch, gpus: 8, link_bandwidth: "100 GB/s", link_latency: "1 us"}
model: {layers: 4, hidden: 512, heads: 8, seq_len: 256, vocab: 1000}
parallelism: {tp: 2, dp: 4}
training: {micro_batch: 1, global_batch: 8}
compute: {gpu: a100-80gb}
"""
GRID = "cluster.link_bandwidth=50 GB/s,100 GB/s"


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    return path


def _hold(out: Path) -> object:
    """Hold ``out``'s sweep lock as a running sweep would; returns the open file."""
    handle = open(out / ".sweep.lock", "ab")  # noqa: SIM115
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    return handle


def test_different_sweep_into_a_running_ones_folder_is_refused(scenario, tmp_path):
    out = tmp_path / "out"
    run_sweep(scenario, [GRID], out_dir=out, workers=1, progress=False)
    held = _hold(out)
    try:
        with pytest.raises(ConfigError, match=r"a different sweep is running into it: "
                                              r"--grid cluster\.link_bandwidth"):
            run_sweep(scenario, ["cluster.link_bandwidth=50 GB/s,400 GB/s"], out_dir=out,
                      workers=1, progress=False)
    finally:
        held.close()
    stored = json.loads((out / "sweep.json").read_text())
    assert stored["grids"][0][1] == ["50 GB/s", "100 GB/s"]  # the running one's, untouched


def test_identical_sweep_waits_and_reuses_every_point(scenario, tmp_path, capsys):
    out = tmp_path / "out"
    first = run_sweep(scenario, [GRID], out_dir=out, workers=1, progress=False)
    held = _hold(out)
    timer = threading.Timer(0.6, held.close)  # the "other" sweep finishes after 0.6 s
    timer.start()
    started = time.monotonic()
    second = run_sweep(scenario, [GRID], out_dir=out, workers=1, progress=False)
    timer.join()
    assert time.monotonic() - started >= 0.5  # it waited for the lock
    assert second.ran == 0 and second.reused == len(first.points) == 2
    assert "identical sweep is running" in capsys.readouterr().err


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text()
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
