"""A run's notes: what the scenario left to defaults or estimates that moves the answer.

:func:`run_notes` gathers them after the run (:mod:`simcore.notes`): the cost table's
extrapolated rows, the kinds a fallback timed, the table rows that matched nothing (each
job's table, with several jobs), and each fault whose fabric re-route stalls the job
(the subnet manager's delay, :mod:`topology.faults`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from distsim_gpu.simcore.notes import RunNote, unique
from distsim_gpu.simcore.units import format_duration
from distsim_gpu.topology import Topology
from distsim_gpu.topology.faults import Fault
from distsim_gpu.topology.routing import END_TO_END_POLICIES

__all__ = ["fault_notes", "run_notes"]


def fault_notes(faults: Sequence[Fault], topology: Topology,
                iteration_time_s: float) -> list[RunNote]:
    """A note per fault that goes down during the run under static or hashed routing: its
    flows stop for the subnet manager's re-route (``subnet_manager_delay_s``)."""
    if topology.routing.policy in END_TO_END_POLICIES:
        return []  # adaptive routing re-routes at once: no stall
    notes = []
    for i, fault in enumerate(faults):
        if fault.kind != "down" or fault.at_s <= 0 or fault.subnet_manager_delay_s <= 0:
            continue
        if fault.at_s >= iteration_time_s:
            continue  # after the run: check_faults_in_run says so
        notes.append(RunNote(
            "fault", f"{fault.describe()}: the flows crossing it stall "
            f"{format_duration(fault.subnet_manager_delay_s)} from "
            f"{format_duration(fault.at_s)} while the subnet manager re-routes (its sweep "
            f"interval; adaptive routing re-routes at once), inside the "
            f"{format_duration(iteration_time_s)} iteration",
            f"faults[{i}].subnet_manager_delay_s"))
    return notes


def run_notes(costs: Iterable[object], faults: Sequence[Fault], topology: Topology,
              iteration_time_s: float) -> tuple[RunNote, ...]:
    """Every note of a run that took ``iteration_time_s`` with the cost models ``costs``
    (each job's) on ``topology`` under ``faults``, without repeats."""
    notes: list[RunNote] = []
    for model in costs:
        notes += getattr(model, "notes", ())  # a cost table's; the roofline assumes nothing
    notes += fault_notes(faults, topology, iteration_time_s)
    return unique(notes)
