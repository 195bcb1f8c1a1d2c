"""``distsim profile layer``: options reach the profiler; without PyTorch a clear error."""

from __future__ import annotations

import builtins
import importlib
import sys

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.workloads.cost.compute import read_cost_table
from distsim_gpu.workloads.cost.profile_layer import LayerTiming

# The module (the package exports a function of the same name).
profiler = importlib.import_module("distsim_gpu.workloads.cost.profile_layer")


@pytest.fixture
def no_torch(monkeypatch):
    """Make ``import torch`` fail, whether or not PyTorch is installed here."""
    real_import = builtins.__import__
    real_import_module = importlib.import_module

    def fake_import(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    def fake_import_module(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import_module(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.setattr(importlib, "import_module", fake_import_module)


@pytest.fixture
def fake_gpu(monkeypatch):
    """The default measurement replaced: 1 µs per token per TP rank forward, twice that
    backward; records what it was asked."""
    calls = []

    def measure(model, *, micro_batch, seq_len, tp, precision, warmup, repeats):
        calls.append((micro_batch, seq_len, tp, precision, warmup, repeats))
        fwd = 1e-6 * micro_batch * seq_len / tp
        return LayerTiming(fwd, 2 * fwd)

    monkeypatch.setattr(profiler, "torch_layer_timing", measure)
    monkeypatch.setattr(profiler, "_torch_software", lambda: "fake torch")
    return calls


def test_without_torch_the_error_names_the_profile_extra(no_torch, tmp_path, capsys):
    out = tmp_path / "t.yaml"
    status = main(["profile", "layer", "--model", "llama3-8b", "--gpu", "h100",
                   "-o", str(out)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("distsim: error: ") and "profiling needs PyTorch" in err
    assert "'profile' extra" in err and "Traceback" not in err
    assert not out.exists()


def test_options_reach_the_profiler_and_the_table(fake_gpu, tmp_path, capsys):
    out = tmp_path / "t.csv"
    status = main(["profile", "layer", "--model", "llama3-8b", "--gpu", "H100 SXM",
                   "--micro-batch", "1", "2", "--seq-len", "1024", "--tp", "1", "4",
                   "--precision", "fp16", "--warmup", "2", "--repeats", "3",
                   "-o", str(out)])
    assert status == 0
    assert capsys.readouterr().out == f"wrote 12 rows to {out}\n"  # 2 mb x 2 tp x 3 passes
    assert sorted(set(fake_gpu)) == [(mb, 1024, tp, "fp16", 2, 3)
                                     for mb in (1, 2) for tp in (1, 4)]
    header, rows = read_cost_table(out)
    assert header.software == "fake torch" and header.precision == "fp16"
    fwd = {(r.micro_batch, r.tp): r.time_s for r in rows if r.pass_ == "fwd"}
    assert fwd[(2, 1)] == pytest.approx(2 * 1024e-6)
    assert fwd[(2, 4)] == pytest.approx(2 * 1024e-6 / 4)


def test_defaults_are_one_micro_batch_the_models_sequence_and_tp_1(fake_gpu, tmp_path):
    assert main(["profile", "layer", "--model", "llama3-8b", "--gpu", "h100",
                 "-o", str(tmp_path / "t.yaml")]) == 0
    assert fake_gpu == [(1, 8192, 1, "bf16", 5, 20)]


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "llama3-8x"], "llama3-8b"),
    (["--model", "mixtral-8x7b"], "experts"),
    (["--model", "llama3-8b", "--repeats", "0"], "repeats"),
])
def test_bad_input_is_a_clear_error(fake_gpu, tmp_path, capsys, argv, message):
    status = main(["profile", "layer", *argv, "--gpu", "h100",
                   "-o", str(tmp_path / "t.yaml")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("distsim: error: ") and message in err


def test_profile_is_a_listed_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "profile" in capsys.readouterr().out
