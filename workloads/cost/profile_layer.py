"""Measure a transformer layer on a real GPU with PyTorch and write a cost table.

The profiler builds one tensor-parallel rank's shard of a dense transformer layer of a
:class:`~workloads.specs.models.ModelSpec` (heads and FFN width divided by ``tp``; no
communication — the simulator models tensor-parallel collectives itself), runs it forward
and backward, and times each pass with CUDA events: ``warmup`` untimed runs, then
``repeats`` timed runs, median kept.  The forward time is also written as the (full)
``recompute`` time: recomputation runs the same kernels.  Rows are written with
:func:`workloads.cost.compute.write_cost_table`, and the header records the GPU, the software
(PyTorch and CUDA versions, device name), the date and the source, as every distsim cost
table must.

PyTorch is imported only inside :func:`torch_layer_timing`; this module imports, and its
writer is usable with any measuring function, without it.  Without PyTorch or without a
CUDA device the default measurement raises :class:`ConfigError` asking for the
``profile`` extra (``pip install 'distsim-gpu[profile]'``, i.e. PyTorch with CUDA).

Command line::

    distsim profile layer --model llama3-8b --gpu h100-sxm \\
        --micro-batch 1 2 4 --seq-len 4096 --tp 1 2 --out h100-llama3-8b.yaml
"""

from __future__ import annotations

import datetime as _dt
import importlib
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from distsim_gpu.simcore.config import check_whole
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import CostRow, TableHeader, write_cost_table
from distsim_gpu.workloads.specs.gpus import canonical_gpu_name
from distsim_gpu.workloads.specs.models import ModelSpec

__all__ = [
    "INSTALL_HINT",
    "PRECISIONS",
    "LayerTiming",
    "MeasureFn",
    "ProfileSettings",
    "profile_layer",
    "torch_layer_timing",
]

INSTALL_HINT = ("install the 'profile' extra: pip install 'distsim-gpu[profile]' "
                "(PyTorch built with CUDA, on a machine with an NVIDIA GPU)")

_MS = 1e-3  # torch.cuda.Event.elapsed_time returns milliseconds
_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
#: The precisions a layer can be profiled in.
PRECISIONS = tuple(sorted(_TORCH_DTYPES))


@dataclass(frozen=True, slots=True)
class LayerTiming:
    """Measured seconds of one layer shard's forward and backward pass."""

    fwd_s: float
    bwd_s: float


MeasureFn = Callable[..., LayerTiming]
"""``measure(model, *, micro_batch, seq_len, tp, precision, warmup, repeats) -> LayerTiming``."""


@dataclass(frozen=True, slots=True)
class ProfileSettings:
    """What :func:`profile_layer` measures and how: every (micro-batch, sequence length,
    tp) of the grid (``seq_lens`` ``None``: the model's), in ``precision``, each pass
    ``warmup`` untimed runs then the median of ``repeats`` timed ones."""

    micro_batches: Sequence[int] = (1,)
    seq_lens: Sequence[int] | None = None
    tps: Sequence[int] = (1,)
    precision: str = "bf16"
    warmup: int = 5
    repeats: int = 20


def profile_layer(model: ModelSpec, *, gpu: str, settings: ProfileSettings = ProfileSettings(),
                  output: str | os.PathLike[str] | None = None,
                  measure: MeasureFn | None = None, software: str | None = None,
                  source: str | None = None,
                  date: str | None = None) -> tuple[TableHeader, tuple[CostRow, ...]]:
    """Measure ``transformer_layer`` fwd/bwd(/recompute) at every (micro_batch, seq_len, tp)
    of ``settings``.

    ``measure`` defaults to :func:`torch_layer_timing`; pass another function (same
    keywords) to time layers some other way.  ``software`` defaults to the PyTorch/CUDA
    versions and device name for the default measurement, ``source`` to this module,
    ``date`` to today (ISO).  Writes the table to ``output`` when given and returns it.
    """
    micro_batches, seq_lens, tps = settings.micro_batches, settings.seq_lens, settings.tps
    precision, warmup, repeats = settings.precision, settings.warmup, settings.repeats
    if model.is_moe:
        raise ConfigError(f"{model.name} has experts; the profiler measures dense layers",
                          key="model", hint="profile MoE layers with a custom measure "
                                            "function, or use RooflineCosts")
    for name, values in (("micro_batches", micro_batches), ("tps", tps),
                         ("seq_lens", seq_lens or (model.seq_len,))):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                             for v in values):
            raise ConfigError(f"must be positive whole numbers, got {values!r}", key=name)
    check_whole(warmup, key="warmup", minimum=0)
    check_whole(repeats, key="repeats")
    if precision not in _TORCH_DTYPES:
        raise ConfigError(f"cannot profile precision {precision!r}", key="precision",
                          hint="valid: " + ", ".join(_TORCH_DTYPES))
    if measure is None:
        measure = torch_layer_timing
        if software is None:
            software = _torch_software()
    gpu_name = canonical_gpu_name(gpu)
    rows: list[CostRow] = []
    for tp in tps:
        for seq_len in seq_lens or (model.seq_len,):
            for micro_batch in micro_batches:
                timing = measure(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp,
                                 precision=precision, warmup=warmup, repeats=repeats)
                for pass_, seconds in (("fwd", timing.fwd_s), ("bwd", timing.bwd_s),
                                       ("recompute", timing.fwd_s)):
                    if not seconds > 0:
                        raise ConfigError(f"measured a non-positive {pass_} time {seconds!r}",
                                          key="measure")
                    rows.append(CostRow(gpu_name, "transformer_layer", pass_, micro_batch,
                                        seq_len, model.hidden, tp, float(seconds)))
    header = TableHeader(
        software=software or "custom measure function",
        date=date or _dt.date.today().isoformat(),
        source=source or "workloads/cost/profile_layer.py (CUDA events, median of "
                         f"{repeats} after {warmup} warm-up runs)",
        gpu=gpu_name, precision=precision, model=model.name)
    if output is not None:
        write_cost_table(output, header, rows)
    return header, tuple(rows)


def _import_torch() -> Any:
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        raise ConfigError("profiling needs PyTorch, which is not installed",
                          hint=INSTALL_HINT) from None
    if not torch.cuda.is_available():
        raise ConfigError("profiling needs a CUDA GPU, and PyTorch sees none",
                          hint=INSTALL_HINT)
    return torch


def _torch_software() -> str:
    torch = _import_torch()
    return (f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
            f"{torch.cuda.get_device_name()}")


def torch_layer_timing(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                       precision: str = "bf16", warmup: int = 5,
                       repeats: int = 20) -> LayerTiming:
    """Median forward and backward seconds of one TP shard of a dense layer, on ``cuda``.

    Pre-norm layer: norm → fused QKV → ``scaled_dot_product_attention`` (causal; flash
    kernels where PyTorch has them) → output projection → residual → norm → MLP (GeLU, or
    SwiGLU with fused gate/up) → residual.  The backward is timed alone (its forward runs
    untimed before each repeat) and includes the input gradient, as a pipeline stage needs.
    """
    if model.mla is not None:
        raise ConfigError("profiling a multi-head latent attention layer is not built",
                          key="model.mla", hint="profile a model without mla")
    torch = _import_torch()
    if model.heads % tp or model.ffn_hidden % tp:
        raise ConfigError(f"tp {tp} must divide heads {model.heads} and ffn_hidden "
                          f"{model.ffn_hidden}", key="tp")
    dtype = getattr(torch, _TORCH_DTYPES[precision])
    device = torch.device("cuda")
    layer = _build_layer(torch, model, tp).to(device=device, dtype=dtype)
    x = torch.randn(micro_batch, seq_len, model.hidden, device=device, dtype=dtype,
                    requires_grad=True)
    grad = torch.randn_like(x)

    def median_s(run: Callable[[Any], Any], prepare: Callable[[], Any]) -> float:
        samples = []
        for i in range(warmup + repeats):
            prepared = prepare()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run(prepared)
            end.record()
            end.synchronize()
            if i >= warmup:
                samples.append(start.elapsed_time(end) * _MS)
        return statistics.median(samples)

    # Forward: nothing to prepare.  Backward: run the forward untimed, then time backward.
    fwd_s = median_s(lambda _: layer(x), lambda: None)
    bwd_s = median_s(lambda out: out.backward(grad), lambda: layer(x))
    return LayerTiming(fwd_s, bwd_s)


def _build_layer(torch: Any, model: ModelSpec, tp: int) -> Any:
    nn = torch.nn
    functional = torch.nn.functional
    h, hd = model.hidden, model.head_dim
    heads = model.heads // tp
    kv_heads = max(1, model.kv_heads // tp)
    ffn = model.ffn_hidden // tp
    gated = model.gated_mlp

    class RMSNorm(nn.Module):  # torch.nn.RMSNorm only exists from PyTorch 2.4
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h))

        def forward(self, x: Any) -> Any:
            scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)
            return (x.float() * scale).to(x.dtype) * self.weight

    def norm() -> Any:
        return nn.LayerNorm(h) if model.norm == "layernorm" else RMSNorm()

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = norm()
            self.qkv = nn.Linear(h, (heads + 2 * kv_heads) * hd, bias=model.attention_bias)
            self.proj = nn.Linear(heads * hd, h, bias=model.attention_bias)
            self.norm2 = norm()
            self.fc1 = nn.Linear(h, ffn * (2 if gated else 1), bias=model.mlp_bias)
            self.fc2 = nn.Linear(ffn, h, bias=model.mlp_bias)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split(
                [heads * hd, kv_heads * hd, kv_heads * hd], dim=-1)
            q = q.view(b, s, heads, hd).transpose(1, 2)
            k = k.view(b, s, kv_heads, hd).transpose(1, 2)
            v = v.view(b, s, kv_heads, hd).transpose(1, 2)
            if kv_heads != heads:
                k = k.repeat_interleave(heads // kv_heads, dim=1)
                v = v.repeat_interleave(heads // kv_heads, dim=1)
            o = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(o.transpose(1, 2).reshape(b, s, heads * hd))
            z = self.fc1(self.norm2(x))
            if gated:
                gate, up = z.chunk(2, dim=-1)
                z = functional.silu(gate) * up
            else:
                z = functional.gelu(z)
            return x + self.fc2(z)

    return Layer()
