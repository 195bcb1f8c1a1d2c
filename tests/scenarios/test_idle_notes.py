"""Settings a run cannot use are said in its notes (``ignored``), and DeepEP asked of a
node it is not built for is a ``defaulted`` note; the run itself goes on."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping


def _notes(data) -> dict[str, list[str]]:
    notes: dict[str, list[str]] = {}
    for note in run_scenario(scenario_from_mapping(data)).notes:
        notes.setdefault(note.key or "", []).append(f"{note.kind}: {note.message}")
    return notes


def _moe(tiny, cluster=None, **changes):
    data = tiny(**changes)
    data["model"].update({"experts": 8, "top_k": 2})
    if cluster is not None:  # replaced whole (tiny() merges a mapping into its own)
        data["cluster"] = cluster
    return data


def test_moe_keys_on_a_dense_model_change_nothing_and_say_so(tiny):
    data = tiny(communication={"all_to_all": "deepep", "deepep_max_nodes": 2},
                compute={"comm_sms": 20})
    data["parallelism"]["moe_overlap"] = True
    notes = _notes(data)
    assert notes["communication.all_to_all"] == [
        "ignored: all_to_all deepep changes nothing: no expert all-to-all runs (a dense "
        "model)"]
    assert notes["parallelism.moe_overlap"][0].startswith("ignored: moe_overlap changes")
    assert "changes nothing" in notes["communication.deepep_max_nodes"][0]
    # The SMs still act as written (every kernel on what they leave), and it says so.
    assert notes["compute.comm_sms"] == [
        "ignored: compute.comm_sms holds 20 SMs for DeepEP's kernels and every kernel runs "
        "on the 88 it leaves, but no DeepEP exchange runs here (the SMs NCCL's overlapped "
        "collectives hold are communication.nccl_sms)"]
    # DeepEP's own caveats belong to runs that exchange tokens.
    assert not any("token" in m for m in notes["communication.all_to_all"])


def test_ep_one_runs_no_exchange(tiny):
    data = _moe(tiny, communication={"all_to_all": "deepep"})
    data["parallelism"]["ep"] = 1
    assert _notes(data)["communication.all_to_all"] == [
        "ignored: all_to_all deepep changes nothing: no expert all-to-all runs (ep 1: every "
        "expert is local)"]


def test_an_exchanging_run_has_no_idle_notes(tiny):
    data = _moe(tiny, cluster={"preset": "dgx-h100", "nodes": 2},
                compute={"gpu": "h100-sxm", "comm_sms": 20},
                parallelism={"tp": 1, "pp": 1, "dp": 16, "ep": 8},
                training={"global_batch": 16},
                communication={"all_to_all": "deepep", "deepep_max_nodes": 1})
    notes = _notes(data)
    assert not [m for ms in notes.values() for m in ms if m.startswith("ignored")]
    assert "communication.deepep_max_nodes" not in notes


@pytest.mark.parametrize("precision, recipe, why", [
    ("bf16", None, "precision bf16 has no FP8 scales"),
    ("fp8", "blockwise", "the blockwise recipe keeps no amax history")])
def test_an_amax_setting_without_an_amax_history_changes_nothing(tiny, precision, recipe, why):
    training = {"precision": precision, "fp8_amax_reduction": "tp",
                **({"fp8_recipe": recipe} if recipe else {})}
    data = tiny(cluster="dgx-h100", compute={"gpu": "h100-sxm"}, training=training,
                parallelism={"tp": 2, "pp": 1, "dp": 4})
    assert _notes(data)["training.fp8_amax_reduction"] == [
        f"ignored: fp8_amax_reduction tp changes nothing: {why}"]
    data["training"].pop("fp8_recipe", None)
    data["training"]["precision"] = "fp8"  # delayed scaling: it acts
    assert "training.fp8_amax_reduction" not in _notes(data)


def test_deepep_on_a_node_it_is_not_built_for_is_a_note(tiny):
    data = _moe(tiny, cluster={"preset": "pcie-8gpu", "nodes": 2},
                parallelism={"tp": 1, "pp": 1, "dp": 16, "ep": 8},
                training={"global_batch": 16}, communication={"all_to_all": "deepep"})
    notes = "\n".join(_notes(data)["communication.all_to_all"])
    assert "this cluster's GPUs have none" in notes
    assert "these nodes have 1 NIC for 8 GPUs" in notes
