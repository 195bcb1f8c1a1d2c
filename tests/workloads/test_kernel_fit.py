"""validation/kernels/fit_kernels.py: its fit recovers known parameters from synthetic
kernel times, its cross-validation holds out whole shape groups, and (where shared/data is
present) the roofline's shipped constants are what it fits."""

from __future__ import annotations

import math

import pytest
from distsim_gpu.workloads.cost.compute import attention_rates as ar
from distsim_gpu.workloads.cost.compute import kernel_tables as kt
from distsim_gpu.workloads.cost.compute import roofline as rf
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import _shared_data_dir, load_script

fk = load_script("validation/kernels/fit_kernels.py", "fit_kernels")
SHAPES = [(m, n, k) for m in (1024, 2048, 8192) for n in (1024, 4096) for k in
          (1024, 2048, 4096, 16384)]


@settings(max_examples=30, deadline=None)
@given(scale=st.floats(0.05, 1.0),
       units=st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=20))
def test_fit_scale_is_exact_on_noiseless_times(scale, units):
    assert fk.fit_scale(units, [u / scale for u in units]) == pytest.approx(scale)


@pytest.mark.parametrize("gpu, e_inf, k_half", [
    ("h100-sxm", 0.7, 128.0), ("b200", 0.6, 512.0), ("mi300x", 0.45, 0.0)])
def test_gemm_fit_recovers_efficiency_and_k_half(gpu, e_inf, k_half):
    rows = [kt.GemmRecord("synthetic", gpu, "bf16", "x", 1, m, n, k, 1.0)
            for m, n, k in SHAPES]
    rows = [kt.GemmRecord(r.source, r.gpu, r.dtype, r.kernel, 1, r.m, r.n, r.k,
                          fk.gemm_unit_time(r, (k_half,)) / e_inf) for r in rows]
    [result] = fk.fit_gemms(rows)
    assert result.fit.scale == pytest.approx(e_inf)
    assert result.fit.shape == (k_half,)
    assert result.cv_median == pytest.approx(0.0, abs=1e-9)


def test_attention_fit_recovers_the_saturating_curve():
    e_inf, s_half, d_half = 0.8, 512.0, 32.0
    rows = []
    for seq in (512, 1024, 2048, 4096, 8192, 16384):
        for dim in (64, 128, 256):
            flops = kt.attention_flops("fwd+bwd", batch=1, heads=16, seq_len=seq,
                                       head_dim_qk=dim, causal=True)
            eff = e_inf * seq / (seq + s_half) * dim / (dim + d_half)
            rows.append(kt.AttentionRecord("synthetic", "h100-sxm", "fa3", "fwd+bwd", True,
                                           seq, dim, flops, flops / (989.4e12 * eff)))
    [result] = fk.fit_attention(rows)
    assert result.fit.scale == pytest.approx(e_inf)
    assert result.fit.shape == (s_half, d_half)
    assert fk.attention_at_reference(result.fit) == pytest.approx(
        e_inf * 4096 / (4096 + s_half) * 128 / (128 + d_half))


def test_memory_fit_is_the_geometric_mean_fraction_of_bandwidth():
    fractions = (0.7, 0.8, 0.9)
    rows = [kt.MemoryRecord("synthetic", "h200", f"op{i}.fwd", 1e9, 1e9 / (4.8e12 * f))
            for i, f in enumerate(fractions)]
    [result] = fk.fit_memory(rows)
    assert result.fit.scale == pytest.approx(math.prod(fractions) ** (1 / 3))


def test_folds_keep_groups_whole_and_cover_every_row_once():
    rows = [(g, i) for g in range(12) for i in range(3)]
    parts = fk.folds(rows, lambda r: r[0])
    assert len(parts) == fk.FOLDS
    assert sorted(i for part in parts for i in part) == list(range(len(rows)))
    for part in parts:
        held = {rows[i][0] for i in part}
        assert all(rows[i][0] not in held for other in parts if other is not part
                   for i in other)
    assert len(fk.folds(rows[:6], lambda r: r[0])) == 2  # fewer groups than folds


def test_errors_are_median_and_p90_of_relative_error():
    measured = [1.0] * 10
    predicted = [1 + i / 100 for i in range(10)]
    assert fk.errors(predicted, measured) == (pytest.approx(0.045), pytest.approx(0.09))
    assert all(math.isnan(x) for x in fk.errors([math.nan], [1.0]))


@pytest.fixture(scope="module")
def fitted():
    data = _shared_data_dir("kernels")
    if data is None:
        pytest.skip("shared/data/kernels is not present")
    return {(r.family, r.key): r for r in fk.fit_all(data)}


def test_shipped_gemm_constants_are_the_fit(fitted):
    for arch in ("blackwell", "cdna3"):
        fit = fitted[("gemm", (arch, "16-bit"))].fit
        assert rf.MATMUL_EFFICIENCY_BY_ARCHITECTURE[arch] == pytest.approx(fit.scale, abs=2e-3)
        assert rf.GEMM_K_HALF_BY_ARCHITECTURE[arch] == fit.shape[0]



def test_shipped_hopper_fp8_efficiency_is_the_fit_on_training_shapes():
    """Hopper's FP8 figure (0.93 of MAMF's best) is what the kernel tables fit on GEMMs
    with every dimension >= 2048 at Hopper's k_half."""
    data = _shared_data_dir("kernels")
    if data is None:
        pytest.skip("shared/data/kernels is not present")
    records, _ = kt.load_gemms(data)
    rows = [r for r in records if fk.architecture(r.gpu) == "hopper" and r.dtype == "fp8"
            and min(r.b * r.m, r.n, r.k) >= 2048 and r.kernel not in fk.GEMM_EVAL_ONLY]
    fit = fk.grid_fit(rows, fk.gemm_unit_time, fk._measured, [(rf.GEMM_K_HALF,)])
    assert len(rows) >= 10
    assert rf.FP8_MATMUL_EFFICIENCY_BY_ARCHITECTURE["hopper"] == pytest.approx(fit.scale,
                                                                              abs=5e-3)


def test_shipped_attention_constants_are_the_fit(fitted):
    for (kernel, arch), (e_inf, s_half, d_half) in ar.ATTENTION_SATURATION.items():
        fit = fitted[("attention", (kernel, arch))].fit
        assert e_inf == pytest.approx(fit.scale, abs=2e-3)
        assert (s_half, d_half) == fit.shape
        if arch == "hopper":
            assert ar.ATTENTION_EFFICIENCY_BY_KERNEL[(kernel, arch)] == pytest.approx(
                fk.attention_at_reference(fit), abs=2e-3)


def test_shipped_memory_constants_are_the_fit(fitted):
    for gpu, value in rf.MEMORY_EFFICIENCY_BY_GPU.items():
        assert value == pytest.approx(fitted[("memory", (gpu, "hbm"))].fit.scale, abs=2e-3)
