"""The layer profiler: clear error without PyTorch, and a writer driven by a fake timer."""

from __future__ import annotations

import builtins
import importlib
import subprocess
import sys

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import TableCosts, read_cost_table
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.profile_layer import (
    INSTALL_HINT,
    LayerTiming,
    ProfileSettings,
    profile_layer,
    torch_layer_timing,
)
from distsim_gpu.workloads.specs.models import get_model


def fake_measure(model, *, micro_batch, seq_len, tp, precision, warmup, repeats):
    """Time proportional to tokens per TP rank: 1 µs per token at tp 1."""
    fwd = 1e-6 * micro_batch * seq_len / tp
    return LayerTiming(fwd, 2 * fwd)


@pytest.fixture
def no_torch(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    real_import_module = importlib.import_module

    def fake_import_module(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("No module named 'torch'")
        return real_import_module(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", fake_import_module)


def test_module_imports_without_torch():
    code = ("import sys, distsim_gpu.workloads.cost.profile_layer, distsim_gpu.workloads; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_torch_asks_for_the_profile_extra(no_torch):
    with pytest.raises(ConfigError) as info:
        torch_layer_timing(get_model("llama3-8b"), micro_batch=1, seq_len=128)
    text = str(info.value)
    assert "profiling needs PyTorch" in text
    assert "'profile' extra" in text and INSTALL_HINT in text


def test_profile_without_measure_and_without_torch(no_torch, tmp_path):
    with pytest.raises(ConfigError, match="distsim-gpu\\[profile\\]"):
        profile_layer(get_model("llama3-8b"), gpu="h100", output=tmp_path / "t.yaml")
    assert not (tmp_path / "t.yaml").exists()


def test_cli_reports_missing_torch(no_torch, tmp_path, capsys):
    code = main(["profile", "layer", "--model", "llama3-8b", "--gpu", "h100",
                 "-o", str(tmp_path / "t.csv")])
    assert code == 2
    assert "profile' extra" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".yaml", ".csv"])
def test_writer_with_fake_measurement(tmp_path, suffix):
    model = get_model("llama3-8b")
    path = tmp_path / f"table{suffix}"
    settings = ProfileSettings(micro_batches=(1, 4), seq_lens=(2048,), tps=(1, 2))
    header, rows = profile_layer(model, gpu="H100", settings=settings, measure=fake_measure,
                                 output=path, software="fake 1.0", date="2024-06-01")
    assert len(rows) == 2 * 2 * 3
    assert header.gpu == "h100-sxm" and header.model == "llama3-8b"
    assert header.software == "fake 1.0" and header.date == "2024-06-01"
    assert "median of 20" in header.source
    assert read_cost_table(path) == (header, rows)

    costs = TableCosts.from_file(path)
    assert costs.layer_time_s("fwd", model, LayerShard(micro_batch=4, seq_len=2048, tp=2)) == (
        pytest.approx(1e-6 * 4 * 2048 / 2))
    assert costs.layer_time_s("bwd", model, LayerShard(micro_batch=2, seq_len=2048)) == (
        pytest.approx(2e-6 * 2 * 2048))
    assert costs.layer_time_s("recompute", model, LayerShard(micro_batch=1, seq_len=2048)) == (
        pytest.approx(1e-6 * 2048))


def test_profiler_rejects_bad_requests():
    model = get_model("llama3-8b")
    with pytest.raises(ConfigError, match="experts"):
        profile_layer(get_model("mixtral-8x7b"), gpu="h100", measure=fake_measure)
    with pytest.raises(ConfigError, match="micro_batches"):
        profile_layer(model, gpu="h100", settings=ProfileSettings(micro_batches=(0,)),
                      measure=fake_measure)
    with pytest.raises(ConfigError, match="cannot profile precision 'fp8'"):
        profile_layer(model, gpu="h100", settings=ProfileSettings(precision="fp8"),
                      measure=fake_measure)
    with pytest.raises(ConfigError, match="warmup: must be a whole number >= 0, got -1"):
        profile_layer(model, gpu="h100", settings=ProfileSettings(warmup=-1), measure=fake_measure)
    with pytest.raises(ConfigError, match="repeats: must be a whole number >= 1, got 0"):
        profile_layer(model, gpu="h100", settings=ProfileSettings(repeats=0), measure=fake_measure)

    def broken(model, **kwargs):
        return LayerTiming(0.0, 1.0)

    with pytest.raises(ConfigError, match="non-positive fwd time"):
        profile_layer(model, gpu="h100", measure=broken)
