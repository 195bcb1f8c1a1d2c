"""A pool of worker processes that die with their parent, or this process alone.

:class:`WorkerPool` runs a function over many tasks: in ``workers`` processes started by a
:class:`~concurrent.futures.ProcessPoolExecutor` whose workers end when the parent is gone
(:func:`~distsim_gpu.simcore.workers.die_with_parent`), or, when one process is asked for
(or there is at most one task), one task after another in this process — no pickling and
no start-up cost, and a task's exception is raised where it happened.

Two ways to run tasks:

* :meth:`WorkerPool.map` — every task, results in the tasks' order;
* :meth:`WorkerPool.as_completed` — results as tasks finish, each a :class:`Finished`
  (its task and :meth:`Finished.result`), with at most ``workers`` tasks in flight.  The
  tasks are drawn from an iterable only when a worker is free, so a caller can decide
  whether to start a task from the results so far (branch and bound, shared claims); every
  finished task is handed back before the next ones are drawn.

A task's progress is the caller's: it sees each result as it lands.  Leaving the pool
(``with``), an exception or a ``KeyboardInterrupt`` in the caller cancels the tasks not
started and waits for the running ones; a parent killed outright takes its workers with it.

With ``scheduler`` (a Dask scheduler's address, ``tcp://host:8786``) the tasks run on that
Dask cluster instead, as many at once as its workers have threads, through the client's
:class:`concurrent.futures.Executor`; the initializer runs once on every worker connected
when the pool opens (start the workers first).  Dask is an optional extra
(``pip install 'distsim-gpu[dask]'``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from itertools import islice
from types import TracebackType
from typing import Any, Generic, TypeVar

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.workers import die_with_parent

__all__ = ["DASK_CONNECT_S", "Finished", "WorkerPool", "Workers", "dask_client"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Finished(Generic[T, R]):
    """A task that finished: ``task`` as given, and its outcome behind :meth:`result`."""

    task: T
    future: Future[R]

    def result(self) -> R:
        """The task's return value; raises what the task raised (or, from a worker, why the
        worker could not return it: it died, or the value could not be pickled)."""
        return self.future.result()


#: Seconds to keep trying to reach a Dask scheduler before the command stops with an error.
DASK_CONNECT_S = 30.0


@dataclass(frozen=True, slots=True)
class Workers:
    """Where a command's tasks run: ``processes`` local worker processes (1: this process),
    or, with ``scheduler``, the Dask cluster at that address (``--scheduler``)."""

    processes: int = 1
    scheduler: str | None = None

    def pool(self, *, max_tasks: int | None = None,
             initializer: Callable[..., None] | None = None,
             initargs: tuple[Any, ...] = ()) -> WorkerPool:
        """A :class:`WorkerPool` running tasks here."""
        return WorkerPool(self.processes, max_tasks=max_tasks, initializer=initializer,
                          initargs=initargs, scheduler=self.scheduler)


def _start_worker(parent_pid: int, initializer: Callable[..., None] | None,
                  initargs: tuple[Any, ...]) -> None:
    die_with_parent(parent_pid)  # (a killed parent leaves no task running)
    # Ctrl-C reaches every process of the terminal's group.  The parent handles it (it
    # cancels the tasks not started and waits for the running ones); a worker interrupted
    # while it held the pool's queue lock left the parent waiting on it for good.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        initializer(*initargs)


class WorkerPool:
    """``workers`` processes (at most ``max_tasks`` when the number of tasks is known), or
    this process when that comes to one.

    ``initializer(*initargs)`` prepares each worker process (it must be picklable: a
    module-level function); it does not run in this process, where the caller's function
    has what it needs already.
    """

    def __init__(self, workers: int, *, max_tasks: int | None = None,
                 initializer: Callable[..., None] | None = None,
                 initargs: tuple[Any, ...] = (), scheduler: str | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        processes = workers if max_tasks is None else min(workers, max_tasks)
        self.workers = workers
        self._executor: Executor | None = None
        self._client: Any = None
        if scheduler is not None:
            self._client, self._executor, self.workers = _dask(scheduler, initializer,
                                                               initargs)
        elif processes > 1:
            self._executor = ProcessPoolExecutor(
                max_workers=processes, initializer=_start_worker,
                initargs=(os.getpid(), initializer, initargs))

    @property
    def in_process(self) -> bool:
        """Whether tasks run here, one after another, rather than in worker processes."""
        return self._executor is None

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the tasks not started, wait for the running ones, end the workers."""
        if self._executor is not None and self._client is None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        elif self._executor is not None:  # (Dask's executor cancels nothing itself)
            self._executor.shutdown(wait=True)
        self._executor = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """``fn`` of every task, in the tasks' order; raises the first failure in that
        order (a single task runs here: there is nothing to overlap it with)."""
        if self._executor is None or len(tasks) <= 1:
            return [fn(task) for task in tasks]
        return list(self._executor.map(fn, tasks))

    def as_completed(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[Finished[T, R]]:
        """``fn`` of each task as it finishes, drawing a task from ``tasks`` only when a
        worker is free (in this process: run, hand back, then draw the next)."""
        if self._executor is None:
            for task in tasks:
                yield Finished(task, _run_here(fn, task))
            return
        pending = iter(tasks)
        running: dict[Future[R], T] = {}
        try:
            while True:
                for task in islice(pending, self.workers - len(running)):
                    running[self._executor.submit(fn, task)] = task
                if not running:
                    return
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    yield Finished(running.pop(future), future)
        finally:
            for future in running:  # (the caller stopped early, or failed)
                future.cancel()


def _run_here(fn: Callable[[T], R], task: T) -> Future[R]:
    """``fn(task)`` run now, its value or exception kept in a finished future."""
    future: Future[R] = Future()
    try:
        future.set_result(fn(task))
    except Exception as error:
        future.set_exception(error)
    return future


def _dask(address: str, initializer: Callable[..., None] | None,
          initargs: tuple[Any, ...]) -> tuple[Any, Executor, int]:
    """A client of the Dask scheduler at ``address``, its executor, and how many tasks its
    workers run at once; the initializer run on each of them."""
    client = dask_client(address)
    if initializer is not None:
        client.run(initializer, *initargs)
    threads = sum(client.nthreads().values())
    return client, client.get_executor(pure=False), threads


def dask_client(address: str) -> Any:
    """A client of the Dask scheduler at ``address`` that has workers, or a clear
    :class:`ConfigError` saying what is missing: the extra, the scheduler, its workers (a
    scheduler without workers would hold every task forever)."""
    try:
        from distributed import Client  # (an optional extra: imported only when asked for)
    except ImportError:
        raise ConfigError("running on a Dask cluster needs dask.distributed",
                          key="--scheduler", hint="pip install 'distsim-gpu[dask]'") from None
    try:
        client = Client(address, timeout=DASK_CONNECT_S)
    except (OSError, TimeoutError, ValueError) as error:
        raise ConfigError(f"cannot connect to the Dask scheduler: {error}",
                          key="--scheduler", source=address,
                          hint="start one with `dask scheduler` and workers with "
                          "`dask worker ADDRESS` (docs/dask.md)") from None
    if sum(client.nthreads().values()) < 1:
        client.close()
        raise ConfigError("the Dask scheduler has no workers", key="--scheduler",
                          source=address, hint="start workers with `dask worker ADDRESS`")
    return client
