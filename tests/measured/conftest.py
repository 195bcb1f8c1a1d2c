"""Fixtures of the measured/ tests: the Kineto corpus read once, small trace documents."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from distsim_gpu.measured.records import RankTrace
from distsim_gpu.measured.traces import load_traces
from distsim_gpu.simcore.trace import Tracer

HTA = "HolisticTraceAnalysis/tests/data/"
DLRM = "param/et_replay/tests/inputs/dlrm_kineto.tar.gz"

# The corpus files the tests read, relative to the ``trace_corpus`` root: file ->
# (ranks in file, world size, GPU model, profiler steps, NCCL kernels per kind), the
# numbers /work/shared/data/traces/SOURCES.txt states for each.
_EXPECTED: dict[str, tuple[list[int], int, str | None, int, dict[str, int]]] = {
    DLRM: (list(range(8)), 8, "Tesla V100-SXM2-32GB", 1, {"sendrecv": 5, "all_reduce": 3}),
    HTA + "nccl_parser_config/nccl_data.json.gz":
        ([0], 2, "NVIDIA A100-PG509-200", 3, {"all_reduce": 15, "broadcast": 6}),
    HTA + "trace_diff/control/control.json.gz":
        ([3], 8, "NVIDIA A100-PG509-200", 6, {"sendrecv": 42, "all_reduce": 18}),
    HTA + "trace_diff/test/test.json.gz":
        ([1], 2, "Tesla V100-SXM2-16GB", 6, {"sendrecv": 43, "all_reduce": 21}),
    HTA + "negative_queue_length_values_check/rank0.json.gz":
        ([0], 16, "NVIDIA A100-SXM4-80GB", 5, {"sendrecv": 80}),
    HTA + "trace_filter/sampled_rank-0.json.gz": ([0], 128, None, 2, {"sendrecv": 10}),
    HTA + "trace_filter/sampled_rank-1.json.gz": ([1], 128, None, 2, {"sendrecv": 10}),
    HTA + "df_index_resolver/df_index_resolver.json.gz":
        ([1], 2, "Tesla V100-SXM2-32GB", 5, {"all_reduce": 2020}),
}


@dataclass(frozen=True, slots=True)
class KinetoCorpus:
    """The Kineto files of the trace corpus, read once: ``traces[name]`` and what
    SOURCES.txt says of each, ``expected[name]``; ``dlrm`` and ``nccl_data`` name the two
    files most tests look into."""

    traces: dict[str, list[RankTrace]]
    expected: dict[str, tuple[list[int], int, str | None, int, dict[str, int]]]
    dlrm: str = DLRM
    nccl_data: str = HTA + "nccl_parser_config/nccl_data.json.gz"


@pytest.fixture(scope="session")
def kineto_corpus(trace_corpus) -> KinetoCorpus:
    """Every Kineto file the tests check, read once for all measured/ tests."""
    return KinetoCorpus({name: load_traces([trace_corpus.root / name]) for name in _EXPECTED},
                        _EXPECTED)


def _kineto_event(name: str, ts: Any, dur: Any, cat: str = "kernel",
                 **args: Any) -> dict[str, Any]:
    """One complete Kineto event on GPU stream 7 (``ts``/``dur`` in µs, as Kineto)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"stream": 7, "device": 0, **args}}


@pytest.fixture(scope="session")
def kineto_event() -> Callable[..., dict[str, Any]]:
    """``kineto_event(name, ts, dur, cat="kernel", **args)``: one Kineto event."""
    return _kineto_event


def _distsim_document(gpus: int = 2, iteration_s: float = 1e-3) -> dict[str, Any]:
    """A distsim trace.json as :class:`Tracer` writes it: one rank group of ``gpus`` GPUs
    with a compute span and a tensor-parallel all-reduce."""
    tracer = Tracer()
    tracer.span("stage 0", "compute", "layer fwd", 0.0, 4e-4, layer="attention")
    tracer.span("stage 0", "tp comm", "all_reduce", 4e-4, 6e-4, collective="all_reduce")
    names = [f"gpu{i}" for i in range(gpus)]
    tracer.metadata["distsim"] = {
        "world_size": gpus, "gpu": "a100-80gb", "iteration_time_s": iteration_s,
        "groups": {"stage 0": {"gpus": names, "ranks": list(range(gpus))}}}
    return tracer.to_chrome_trace()


@pytest.fixture(scope="session")
def distsim_document() -> Callable[..., dict[str, Any]]:
    """``distsim_document(gpus=2, iteration_s=1e-3)``: a small distsim trace.json."""
    return _distsim_document


def _write_tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, blob in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            archive.addfile(info, io.BytesIO(blob))
    return path


@pytest.fixture(scope="session")
def write_tar() -> Callable[[Path, dict[str, bytes]], Path]:
    """``write_tar(path, {member: bytes})``: a .tar.gz of those members, in that order."""
    return _write_tar


def _write_json(path: Path, data: Any) -> Path:
    text = json.dumps(data)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.fixture(scope="session")
def write_json() -> Callable[[Path, Any], Path]:
    """``write_json(path, data)``: ``data`` as JSON, gzip-compressed for a ``.gz`` name."""
    return _write_json
