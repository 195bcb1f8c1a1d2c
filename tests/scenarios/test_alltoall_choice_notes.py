"""``communication.all_to_all: auto`` says which plan its all-to-alls ran: the choice is
per call (group and size), the least predicted time, and moves the answer."""

from __future__ import annotations

from distsim_gpu.collectives import CommParams
from distsim_gpu.scenarios.run_notes import alltoall_choice_notes
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping


def test_one_plan_for_every_call_is_said_once():
    (note,) = alltoall_choice_notes(CommParams(all_to_all="auto"), {"flat": 3})
    assert note.kind == "defaulted" and note.key == "communication.all_to_all"
    assert note.message.startswith("all_to_all auto ran flat for every all-to-all: per call")


def test_two_plans_are_counted_in_the_order_first_chosen():
    (note,) = alltoall_choice_notes(CommParams(all_to_all="auto"),
                                    {"hierarchical": 2, "flat": 1})
    assert ("ran hierarchical for 2, flat for 1 of its 3 kinds of call (a group and a size)"
            in note.message)


def test_a_mode_given_or_no_all_to_all_is_quiet():
    assert alltoall_choice_notes(CommParams(all_to_all="flat"), {"flat": 3}) == []
    assert alltoall_choice_notes(CommParams(all_to_all="auto"), {}) == []


def _moe_run(tiny, mode: str):
    data = tiny(compute={"gpu": "h100-sxm"},
                parallelism={"tp": 1, "pp": 1, "dp": 16, "ep": 16},
                training={"global_batch": 16}, communication={"all_to_all": mode})
    data["model"].update({"experts": 16, "top_k": 2})
    data["cluster"] = {"preset": "dgx-h100", "nodes": 2}  # replaced whole
    return run_scenario(scenario_from_mapping(data))


def test_the_note_names_the_plan_the_run_ran(tiny):
    """Forcing the plan the note names reproduces the auto run to the digit."""
    auto = _moe_run(tiny, "auto")
    (note,) = [n for n in auto.notes if n.key == "communication.all_to_all"]
    chosen = note.message.removeprefix("all_to_all auto ran ").split(" for every")[0]
    assert chosen in ("flat", "hierarchical")
    assert _moe_run(tiny, chosen).iteration_time_s == auto.iteration_time_s
    other = "flat" if chosen == "hierarchical" else "hierarchical"
    assert _moe_run(tiny, other).iteration_time_s != auto.iteration_time_s
