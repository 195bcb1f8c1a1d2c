"""validation/memory_bandwidth/measure_bandwidth.py: the bytes an element-wise op moves, by
hand, and the rate of a kernel in a synthetic Kineto trace (the figure behind the
roofline's MEMORY_EFFICIENCY)."""

from __future__ import annotations

import gzip
import importlib.util
import json

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "validation" / "memory_bandwidth" / "measure_bandwidth.py"


@pytest.fixture(scope="module")
def measure():
    spec = importlib.util.spec_from_file_location("measure_bandwidth", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


N = 32 * 1024 * 1024  # elements: 128 MiB in fp32, past any L2


@pytest.mark.parametrize("name, dims, types, expected", [
    ("aten::add", [[N], [N], []], ["float", "float", "Scalar"], 3 * 4 * N),  # 2 in, 1 out
    ("aten::mul", [[N], [1]], ["float", "float"], 4 * N + 4 + 4 * N),  # broadcast operand
    ("aten::add_", [[N], [N]], ["float", "float"], 3 * 4 * N),  # reads both, writes self
    ("aten::copy_", [[N], [N]], ["c10::BFloat16", "float"], 2 * N + 4 * N),  # cast copy
    ("aten::fill_", [[N], []], ["float", "Scalar"], 4 * N),  # writes only
    ("aten::softmax", [[N]], ["float"], None),  # not a kind the script measures
])
def test_op_bytes_by_hand(measure, name, dims, types, expected):
    assert measure.op_bytes(name, dims, types) == expected


def _trace(path, duration_us: float) -> None:
    """One aten::add over two N-element fp32 tensors, its launch and its kernel."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 7, "ts": 100,
         "dur": 50, "args": {"Input Dims": [[N], [N], []],
                             "Input type": ["float", "float", "Scalar"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7,
         "ts": 110, "dur": 5, "args": {"correlation": 42}},
        {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0,
         "tid": 9, "ts": 120, "dur": duration_us, "args": {"correlation": 42}},
    ]
    data = {"deviceProperties": [{"name": "NVIDIA A100-SXM4-80GB"}], "traceEvents": events}
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(data, handle)


def test_a_kernels_rate_is_its_ops_bytes_over_its_time(measure, tmp_path, capsys):
    path = tmp_path / "rank0.json.gz"
    _trace(path, duration_us=250.0)
    device, rates = measure.rates_gb_per_s(str(path))
    assert device == "NVIDIA A100-SXM4-80GB"
    assert rates["aten::add"] == [pytest.approx(3 * 4 * N / 250e-6 / 1e9)]  # 1610 GB/s
    assert measure.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "datasheet 2039 GB/s" in out and "= 0.79 of the datasheet" in out


def test_a_rate_above_the_datasheet_is_left_out(measure, tmp_path, capsys):
    path = tmp_path / "rank0.json.gz"
    _trace(path, duration_us=100.0)  # 4 TB/s: the operands cannot have come from HBM
    measure.main([str(path)])
    out = capsys.readouterr().out
    assert "datasheet 2039 GB/s" in out
    assert "kernels" not in out  # neither the op's line nor the summary: nothing kept


def test_a_file_that_is_not_a_trace_is_named_and_skipped(measure, tmp_path, capsys):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip")
    good = tmp_path / "rank0.json.gz"
    _trace(good, duration_us=250.0)
    assert measure.main([str(bad), str(tmp_path / "missing.json"), str(good)]) == 0
    out = capsys.readouterr().out
    assert f"{bad}: not a readable Kineto trace (BadGzipFile" in out
    assert "missing.json: not a readable Kineto trace (FileNotFoundError" in out
    assert "= 0.79 of the datasheet" in out  # the good file is still measured
