"""WorkerPool: results in order or as completed, a task's exception, in-process mode, the
initializer, lazy drawing of tasks, and workers that end when the pool closes."""

from __future__ import annotations

import os
import signal

import pytest
from distsim_gpu.simcore.pool import WorkerPool

_STATE: dict[str, int] = {}


def _square(x: int) -> int:
    return x * x


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x


def _remember(value: int) -> None:
    _STATE["value"] = value


def _recall(x: int) -> tuple[int, int]:
    return x, _STATE.get("value", -1)


def _pid(_x: int) -> int:
    return os.getpid()


def _ignores_ctrl_c(_x: int) -> bool:
    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_in_process_when_one_worker_or_at_most_one_task():
    assert WorkerPool(1).in_process
    assert WorkerPool(4, max_tasks=1).in_process
    assert WorkerPool(4, max_tasks=0).in_process
    with WorkerPool(2) as pool:
        assert not pool.in_process
    with pytest.raises(ValueError, match="at least 1"):
        WorkerPool(0)


@pytest.mark.parametrize("workers", [1, 2])
def test_map_keeps_the_tasks_order(workers):
    with WorkerPool(workers) as pool:
        assert pool.map(_square, list(range(20))) == [x * x for x in range(20)]
        assert pool.map(_square, []) == []


def test_in_process_runs_here_and_skips_the_initializer():
    _STATE.clear()
    with WorkerPool(1, initializer=_remember, initargs=(7,)) as pool:
        assert pool.map(_pid, [1, 2]) == [os.getpid()] * 2
        assert [d.result() for d in pool.as_completed(_recall, [5])] == [(5, -1)]
    assert "value" not in _STATE


def test_workers_leave_ctrl_c_to_the_parent():
    """A worker interrupted by the terminal's Ctrl-C while it held the pool's queue lock
    left the parent waiting for good; workers ignore it, and the parent cancels what has
    not started.  (Whether this process takes it depends on how the suite was started: a
    shell's background job ignores it from the start.)"""
    with WorkerPool(2) as pool:
        assert pool.map(_ignores_ctrl_c, [1, 2, 3]) == [True] * 3


def test_workers_run_the_initializer_in_other_processes():
    with WorkerPool(2, initializer=_remember, initargs=(7,)) as pool:
        assert sorted(pool.map(_recall, [1, 2, 3])) == [(1, 7), (2, 7), (3, 7)]
        assert os.getpid() not in pool.map(_pid, [1, 2, 3])


@pytest.mark.parametrize("workers", [1, 2])
def test_as_completed_hands_back_every_task_with_its_result(workers):
    with WorkerPool(workers) as pool:
        done = {d.task: d.result() for d in pool.as_completed(_square, range(10))}
    assert done == {x: x * x for x in range(10)}


def test_as_completed_in_process_keeps_the_order():
    with WorkerPool(1) as pool:
        assert [d.task for d in pool.as_completed(_square, [3, 1, 2])] == [3, 1, 2]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_tasks_exception_is_raised_by_its_result_only(workers):
    with WorkerPool(workers) as pool:
        outcomes = {}
        for done in pool.as_completed(_fail_on_three, range(5)):
            try:
                outcomes[done.task] = done.result()
            except ValueError as error:
                outcomes[done.task] = str(error)
        assert outcomes == {0: 0, 1: 1, 2: 2, 3: "three", 4: 4}
        with pytest.raises(ValueError, match="three"):
            pool.map(_fail_on_three, [1, 2, 3, 4])


@pytest.mark.parametrize("workers", [1, 2])
def test_tasks_are_drawn_only_when_a_worker_is_free(workers):
    drawn: list[int] = []
    finished: list[int] = []

    def tasks():
        for x in range(6):
            # Never more than ``workers`` drawn and not yet handed back.
            assert len(drawn) - len(finished) < workers
            drawn.append(x)
            yield x

    with WorkerPool(workers) as pool:
        for done in pool.as_completed(_square, tasks()):
            finished.append(done.task)
    assert sorted(finished) == list(range(6))


def test_an_exception_in_the_caller_cancels_the_rest_and_closes_the_pool():
    pool = WorkerPool(2)
    with pytest.raises(RuntimeError), pool:
        for _done in pool.as_completed(_square, range(100)):
            raise RuntimeError("caller failed")
    assert pool.in_process  # closed: no executor left
