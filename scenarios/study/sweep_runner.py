"""Where a sweep's points run: each from its resolved configuration, in a local
:class:`~distsim_gpu.simcore.pool.WorkerPool` (or this process) or on a Dask cluster;
results come back as points finish."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import DistsimError
from distsim_gpu.simcore.pool import WorkerPool, dask_client

__all__ = ["Job", "run_dask", "run_local", "run_point"]


def run_point(config: dict[str, Any], source: str) -> dict[str, Any]:
    """Run one point from its resolved configuration (in a worker, or in-process).

    Returns ``{"status": "ok", "summary": …}`` or ``{"status": "failed", "error": …,
    "retry": bool}``; ``retry`` marks an unexpected error (not a :class:`DistsimError`)
    that a restarted sweep runs again.
    """
    try:
        scenario = scenario_from_mapping(config, source=source)
        report = run_scenario(scenario)
    except DistsimError as error:
        return {"status": "failed", "error": str(error), "retry": False}
    except Exception as error:  # a bug in one point must not lose the whole sweep
        return {"status": "failed", "error": f"{type(error).__name__}: {error}",
                "retry": True}
    return {"status": "ok", "summary": json.loads(json.dumps(report.to_json_dict()))}


Job = tuple[str, dict[str, Any], str]  # (point id, resolved config, scenario source)


def run_local(jobs: Sequence[Job], workers: int, admit: Callable[[Job], bool] = bool,
              ) -> Iterator[tuple[str, dict[str, Any]]]:
    """Run the ``jobs`` that ``admit`` takes, each asked just before it would start (so a
    sweep sharing the folder can take the others meanwhile), ``workers`` at a time."""
    admitted = (job for job in jobs if admit(job))
    with WorkerPool(workers, max_tasks=len(jobs)) as pool:
        for done in pool.as_completed(_run_job, admitted):
            yield done.task[0], _outcome(done.result)


def _run_job(job: Job) -> dict[str, Any]:
    """:func:`run_point` of a job (a worker's task)."""
    return run_point(job[1], job[2])


def _outcome(result: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A finished point's outcome; a worker that died (or could not return one) is a
    retryable failure.  (In this process :func:`run_point` itself catches every error.)"""
    try:
        return result()
    except Exception as error:
        return {"status": "failed", "error": f"{type(error).__name__}: {error}",
                "retry": True}


def run_dask(jobs: Sequence[Job], address: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Run ``jobs`` on the Dask cluster at ``address``: ``(point id, outcome)`` as each
    finishes."""
    client = dask_client(address)  # (the extra, the scheduler and its workers checked)
    from distributed import as_completed
    try:
        futures = {}
        for pid, config, source in jobs:
            future = client.submit(run_point, config, source, pure=False,
                                   key=f"distsim-sweep-{pid}-{os.urandom(4).hex()}")
            futures[future] = pid
        for future in as_completed(futures):
            yield futures[future], _outcome(future.result)
    finally:
        client.close()
