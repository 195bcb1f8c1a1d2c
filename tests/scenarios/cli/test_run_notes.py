"""Run notes through ``distsim run``: every assumption that moves the answer is said on
the terminal, in ``--json``, in ``summary.json`` and in ``report.html``; a cost table
that matches nothing is refused."""

from __future__ import annotations

import json

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.workloads.cost.compute import CostRow, TableHeader, write_cost_table

HEADER = TableHeader(software="unit test", date="2026-01-01", source="unit test",
                     gpu="a100-80gb", precision="bf16", model="tiny-gpt")


def run_cli(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def _table(path, kinds=("transformer_layer",)):
    """Rows at micro-batch 1 only (the tiny model: hidden 256, seq_len 128, tp 2)."""
    rows = [CostRow("a100-80gb", kind, pass_, 1, 128, 256, 2, seconds)
            for kind in kinds for pass_, seconds in (("fwd", 1e-3), ("bwd", 2e-3))]
    write_cost_table(path, HEADER, rows)
    return path


@pytest.fixture
def table_scenario(tmp_path, tiny, write_scenario):
    table = _table(tmp_path / "table.yaml")
    data = tiny(compute={"costs": str(table)},
                training={"micro_batch": 2, "global_batch": 8})
    return write_scenario(tmp_path / "tiny.yaml", data)


def test_an_extrapolated_cost_table_is_said_everywhere(capsys, tmp_path, table_scenario):
    status, out, _ = run_cli(capsys, "run", table_scenario)
    assert status == 0
    # 2 x 128 tokens from the one point at 128: proportional, so fwd takes 2 ms.
    assert "note: extrapolated [compute.costs]" in out
    assert "256 tokens outside the measured 128..128" in out
    status, out, _ = run_cli(capsys, "run", table_scenario, "--json")
    notes = json.loads(out)["notes"]
    kinds = {(n["kind"], n["key"]) for n in notes}
    assert ("extrapolated", "compute.costs") in kinds
    assert any("transformer_layer fwd" in n["message"] for n in notes)
    folder = tmp_path / "out"
    status, _, _ = run_cli(capsys, "run", table_scenario, "--out", folder, "--no-trace")
    assert status == 0
    assert json.loads((folder / "summary.json").read_text())["notes"] == notes
    page = (folder / "report.html").read_text()
    assert "Notes: assumptions that move the answer" in page
    assert "256 tokens outside the measured 128..128" in page


def test_a_measured_shape_has_no_extrapolation_note(capsys, tmp_path, tiny, write_scenario):
    table = _table(tmp_path / "table.yaml")
    path = write_scenario(tmp_path / "tiny.yaml", tiny(compute={"costs": str(table)}))
    status, out, _ = run_cli(capsys, "run", path, "--json")
    assert status == 0
    assert not [n for n in json.loads(out)["notes"] if n["kind"] == "extrapolated"]


def test_a_table_whose_kinds_match_no_operator_is_refused(capsys, tmp_path, tiny,
                                                          write_scenario):
    table = _table(tmp_path / "table.yaml", kinds=("attn", "mlp"))
    path = write_scenario(tmp_path / "tiny.yaml", tiny(compute={"costs": str(table)}))
    status, _, err = run_cli(capsys, "run", path)
    assert status == 2
    assert "compute.costs" in err and "attn, mlp" in err and "match no layer kind" in err
    assert "qkv" in err  # the valid kinds are listed


def test_kinds_beside_real_operators_are_noted_as_ignored(capsys, tmp_path, tiny,
                                                          write_scenario):
    table = _table(tmp_path / "table.yaml", kinds=("attn", "qkv"))
    path = write_scenario(tmp_path / "tiny.yaml", tiny(compute={"costs": str(table)}))
    status, out, _ = run_cli(capsys, "run", path, "--json")
    assert status == 0
    ignored = [n["message"] for n in json.loads(out)["notes"] if n["kind"] == "ignored"]
    assert any("kinds attn match no operator" in m for m in ignored)


def test_a_fault_stall_is_a_note_with_the_fault_the_time_and_the_delay(capsys, tmp_path,
                                                                       write_scenario):
    scenario = {
        "name": "fault-stall",
        "cluster": {"preset": "dgx-a100", "nodes": 2,
                    "fabric": {"kind": "fat-tree", "nics_per_leaf": 8}},
        "model": {"name": "gpt-1.3b", "layers": 24, "hidden": 2048, "heads": 16,
                  "seq_len": 2048, "vocab": 50257},
        "parallelism": {"tp": 8, "dp": 2},
        "training": {"micro_batch": 2, "global_batch": 32, "recompute": "none",
                     "precision": "bf16"},
        "compute": {"gpu": "a100-80gb", "costs": "roofline"},
        "faults": [{"target": "switch", "name": "spine0", "kind": "down", "at_s": 0.1}],
    }
    path = write_scenario(tmp_path / "fault.yaml", scenario)
    status, out, _ = run_cli(capsys, "run", path, "--json")
    assert status == 0
    data = json.loads(out)
    (note,) = [n for n in data["notes"] if n["kind"] == "fault"]
    assert note["key"] == "faults[0].subnet_manager_delay_s"
    assert "switch spine0 down at 0.1 s" in note["message"]
    assert "stall 10 s from 100 ms" in note["message"]
    # The stall is in the iteration: it is longer than the delay itself.
    assert data["iteration_time_s"] > 10.0
    scenario["faults"][0]["subnet_manager_delay_s"] = "0 s"
    write_scenario(path, scenario)
    status, out, _ = run_cli(capsys, "run", path, "--json")
    data = json.loads(out)
    assert not [n for n in data["notes"] if n["kind"] == "fault"]
    assert data["iteration_time_s"] < 1.0


@pytest.mark.parametrize("value", ["400", "4e11"])
def test_a_bare_bandwidth_is_an_error_with_units(capsys, tmp_path, tiny, write_scenario,
                                                 value):
    path = write_scenario(tmp_path / "tiny.yaml", tiny())
    status, out, err = run_cli(capsys, "run", path, "--set", f"cluster.link_bandwidth={value}")
    assert status == 2 and out == ""
    assert "cluster.link_bandwidth" in err
    assert "a bandwidth needs a unit" in err and "400Gb/s or 50GB/s" in err


def test_a_resolved_configuration_reads_back_with_bandwidth_units(capsys, tmp_path,
                                                                  tiny, write_scenario):
    path = write_scenario(tmp_path / "tiny.yaml", tiny())
    folder = tmp_path / "out"
    assert run_cli(capsys, "run", path, "--out", folder, "--no-trace", "--json")[0] == 0
    first = json.loads((folder / "summary.json").read_text())
    assert first["config"]["cluster"]["link_bandwidth"].endswith(" B/s")
    status, out, _ = run_cli(capsys, "run", folder / "resolved.yaml", "--json")
    assert status == 0
    assert json.loads(out)["iteration_time_s"] == first["iteration_time_s"]


def test_the_strategy_line_names_a_tp_mode_other_than_1d(capsys, tmp_path, tiny,
                                                         write_scenario):
    path = write_scenario(tmp_path / "tiny.yaml", tiny(
        cluster={"preset": "switch", "gpus": 8},
        parallelism={"tp": 4, "pp": 1, "dp": 2, "tp_mode": "2d"},
        training={"micro_batch": 2, "global_batch": 8}))
    status, out, _ = run_cli(capsys, "run", path)
    assert status == 0
    (line,) = [x for x in out.splitlines() if x.startswith("  strategy")]
    assert "tp 4 · pp 1 · dp 2; tp_mode 2d" in line
