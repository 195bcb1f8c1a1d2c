"""The record types every trace format is read into, and their small helpers."""

from __future__ import annotations

import pytest
from distsim_gpu.measured.records import (
    CpuEvent,
    GpuEvent,
    ProfilerStep,
    RankTrace,
    collective_kind,
    dtype_bytes,
)


@pytest.mark.parametrize(("name", "kind"), [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     "all_reduce"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "sendrecv"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
    ("ncclKernel_ReduceScatter_RING_SIMPLE_Sum_bf16", "reduce_scatter"),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "broadcast"),
    ("ncclKernel_Reduce_RING_LL_Sum_half", "reduce"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "other"),
])
def test_collective_kind_from_kernel_name(name, kind):
    assert collective_kind(name) == kind


def test_collective_kind_falls_back_to_the_collective_name_arg():
    assert collective_kind("ncclDevKernel_Generic", "_reduce_scatter_base") == "reduce_scatter"


@pytest.mark.parametrize(("name", "size"), [
    ("float", 4), ("Float", 4), ("c10::BFloat16", 2), ("c10::Half", 2), ("long int", 8),
    ("unsigned char", 1), ("signed char", 1), ("double", 8), ("float8_e4m3fn", 1),
    ("c10::complex<float>", None), ("", None),
])
def test_dtype_bytes_reads_pytorch_spellings(name, size):
    assert dtype_bytes(name) == size


def test_input_bytes_is_shape_times_element_size_where_both_are_known():
    scope = CpuEvent("nccl:all_reduce", "user_annotation", 1, 0.0, 1.0,
                     input_dims=((1024, 3), (), (7,)), input_types=("c10::BFloat16", "int",
                                                                     "mystery"))
    assert scope.input_bytes(0) == 1024 * 3 * 2
    assert scope.input_bytes(1) == 4  # a scalar: no extents, one element
    assert scope.input_bytes(2) is None  # dtype unknown
    assert scope.input_bytes(3) is None  # no such input
    assert CpuEvent("op", "cpu_op", 1, 0.0, 1.0).input_bytes() is None


def test_rank_trace_counts_nccl_kernels_per_kind_and_ends_are_start_plus_duration():
    events = (GpuEvent("gemm", "compute", 0.0, 1.0),
              GpuEvent("nccl a", "communication", 1.0, 0.5, collective="all_reduce"),
              GpuEvent("nccl b", "communication", 2.0, 0.5, collective="all_gather"),
              GpuEvent("nccl c", "communication", 3.0, 0.25, collective="all_reduce"))
    trace = RankTrace("t.json", 0, 1, None, (ProfilerStep(1, 0.5, 3.0),), events)
    assert trace.nccl_counts() == {"all_gather": 1, "all_reduce": 2}
    assert list(trace.nccl_counts()) == ["all_gather", "all_reduce"]
    assert trace.steps[0].end_s == 3.5
    assert events[3].end_s == 3.25
