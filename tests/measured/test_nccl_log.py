"""Tests of the nccl-tests log reader: the real logs in shared/data, synthetic logs of
other nccl-tests versions and of pasted-text noise, malformed input, and a property test
that any row printed the way nccl-tests prints it reads back."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from distsim_gpu.measured.nccl_log import NcclLog, NcclRow, parse_nccl_log, split_nccl_runs
from distsim_gpu.simcore.errors import DistsimError, ParseError
from hypothesis import given, settings
from hypothesis import strategies as st

GIB = 2**30
MIB = 2**20


# Real logs in the ``nccl_logs`` fixture's folder.
OCI = "oci_oke_a100_40gb_2node_roce_allreduce.txt"
GCP = "gcp_a3mega_h100_2node_allreduce.txt"
META = "meta_gcm_testfixture_a100_80gb_1node_and_2node.txt"


def _row(log: NcclLog, size_bytes: int) -> NcclRow:
    (row,) = [row for row in log.rows if row.size_bytes == size_bytes]
    return row


# --- the real logs ---------------------------------------------------------------------


def test_oci_a100_roce_log(nccl_logs: Path) -> None:
    log = parse_nccl_log(nccl_logs / OCI)
    assert len(log.sections) == 1
    assert len(log.rows) == 31
    assert log.rows[0].size_bytes == 8
    assert log.rows[-1].size_bytes == 8 * GIB
    assert log.num_ranks == 16
    assert log.gpu_model == "NVIDIA A100-SXM4-40GB"
    assert log.op is None  # the excerpt has no command line or test banner
    assert log.nccl_version is None
    assert log.avg_busbw_bytes_per_s == pytest.approx(66.4834e9)

    big = _row(log, 8 * GIB)
    assert big.count == 2147483648
    assert (big.dtype, big.redop, big.root) == ("float", "sum", -1)
    assert big.out_of_place_time_s == pytest.approx(67689e-6)
    assert big.out_of_place_algbw_bytes_per_s == pytest.approx(126.90e9)
    assert big.out_of_place_busbw_bytes_per_s == pytest.approx(237.94e9)
    assert big.in_place_time_s == pytest.approx(67811e-6)
    assert big.in_place_busbw_bytes_per_s == pytest.approx(237.52e9)
    assert big.time_s == pytest.approx((67689e-6 + 67811e-6) / 2)
    assert big.line == 61
    assert log.rows[0].line == 31
    assert log.rows[0].out_of_place_time_s == pytest.approx(36.47e-6)  # ~35 us latency


def test_gcp_h100_log_in_markdown(nccl_logs: Path) -> None:
    log = parse_nccl_log(nccl_logs / GCP)
    assert len(log.sections) == 1
    assert len(log.rows) == 31
    assert (log.rows[0].size_bytes, log.rows[-1].size_bytes) == (8, 8 * GIB)
    assert log.op == "all_reduce"  # from the quoted mpirun … all_reduce_perf line
    assert log.num_ranks == 16  # 16 device lines (the first lost its '#'), -np 16
    assert log.gpu_model == "NVIDIA H100 80GB HBM3"
    assert log.avg_busbw_bytes_per_s == pytest.approx(70.742e9)  # once, not from the prose

    big = _row(log, 8 * GIB)
    assert big.out_of_place_time_s == pytest.approx(47535e-6)
    assert big.out_of_place_busbw_bytes_per_s == pytest.approx(338.82e9)
    assert big.in_place_busbw_bytes_per_s == pytest.approx(337.35e9)
    first = log.rows[0]
    assert first.line == 33
    assert first.out_of_place_time_s == pytest.approx(135.8e-6)
    assert first.in_place_time_s == pytest.approx(123.5e-6)


def test_meta_file_holds_two_runs(nccl_logs: Path) -> None:
    path = nccl_logs / META
    single, pairwise = split_nccl_runs(path)

    assert len(single.rows) == 6
    assert single.num_ranks == 8
    assert single.gpu_model == "NVIDIA A100-SXM4-80GB"
    assert single.nccl_version == "2.16.2+cuda11.6"
    assert single.avg_busbw_bytes_per_s == pytest.approx(210.99e9)
    assert (single.rows[0].size_bytes, single.rows[-1].size_bytes) == (32 * MIB, GIB)
    assert single.rows[0].line == 23
    assert _row(single, GIB).out_of_place_time_s == pytest.approx(8109.1e-6)
    assert _row(single, GIB).out_of_place_busbw_bytes_per_s == pytest.approx(231.72e9)

    assert len(pairwise.rows) == 6
    assert pairwise.num_ranks == 16
    assert pairwise.gpu_model == "NVIDIA A100-SXM4-80GB"
    assert pairwise.nccl_version == "2.12.12+cuda11.6"
    assert pairwise.avg_busbw_bytes_per_s == pytest.approx(150.209e9)
    assert (pairwise.rows[0].size_bytes, pairwise.rows[-1].size_bytes) == (32 * MIB, GIB)
    assert pairwise.rows[0].line == 58
    assert _row(pairwise, GIB).out_of_place_time_s == pytest.approx(11013e-6)
    assert _row(pairwise, GIB).out_of_place_busbw_bytes_per_s == pytest.approx(182.80e9)

    whole = parse_nccl_log(path)
    assert whole.sections == (single, pairwise)
    assert len(whole.rows) == 12
    assert whole.num_ranks is None  # 8 and 16: the runs differ
    assert whole.nccl_version is None
    assert whole.gpu_model == "NVIDIA A100-SXM4-80GB"  # shared


@pytest.mark.parametrize("name", [OCI, GCP, META])
def test_real_logs_are_self_consistent(name: str, nccl_logs: Path) -> None:
    """algbw = size/time and, for all_reduce, busbw = algbw * 2(n-1)/n (README)."""
    for run in split_nccl_runs(nccl_logs / name):
        assert run.num_ranks is not None
        factor = 2 * (run.num_ranks - 1) / run.num_ranks
        lines = [row.line for row in run.rows]
        assert lines == sorted(set(lines))
        for row in run.rows:
            halves = [(row.out_of_place_time_s, row.out_of_place_algbw_bytes_per_s,
                       row.out_of_place_busbw_bytes_per_s),
                      (row.in_place_time_s, row.in_place_algbw_bytes_per_s,
                       row.in_place_busbw_bytes_per_s)]
            for time_s, algbw, busbw in halves:
                assert time_s is not None and algbw is not None and busbw is not None
                if algbw >= 10e9:  # two decimals of GB/s: ≤ 0.05 % rounding from here on
                    assert row.size_bytes / time_s == pytest.approx(algbw, rel=2e-3)
                    assert busbw == pytest.approx(algbw * factor, rel=2e-3)


def test_single_run_log_is_its_own_section(nccl_logs: Path) -> None:
    log = parse_nccl_log(nccl_logs / OCI)
    (run,) = log.sections
    assert run.rows == log.rows
    assert run.sections == ()
    assert split_nccl_runs(nccl_logs / OCI) == [run]


# --- other nccl-tests versions -----------------------------------------------------------

ALL_GATHER_OLD = """\
$ mpirun -np 4 ./build/all_gather_perf -b 1K -e 4K -f 2
# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
#   Rank  0 Pid  12001 on     dgx01 device  0 [0x06] Tesla V100-SXM2-32GB
#   Rank  1 Pid  12002 on     dgx01 device  1 [0x07] Tesla V100-SXM2-32GB
#   Rank  2 Pid  12003 on     dgx01 device  2 [0x0a] Tesla V100-SXM2-32GB
#   Rank  3 Pid  12004 on     dgx01 device  3 [0x0b] Tesla V100-SXM2-32GB
#
#                                             out-of-place                       in-place
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024            64   float    12.34    0.08    0.06  0e+00    11.90    0.09    0.06  0e+00
        2048           128   float    12.80    0.16    0.12  0e+00    12.50    0.16    0.12  0e+00
        4096           256   float    13.10    0.31    0.23  0e+00    13.00    0.32    0.24  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.138333
"""


def test_all_gather_without_redop_and_root_columns() -> None:
    log = parse_nccl_log(ALL_GATHER_OLD, source="ag.log")
    assert log.op == "all_gather"
    assert log.num_ranks == 4
    assert log.gpu_model == "Tesla V100-SXM2-32GB"
    assert [row.size_bytes for row in log.rows] == [1024, 2048, 4096]
    first = log.rows[0]
    assert (first.count, first.dtype, first.redop, first.root) == (64, "float", "none", -1)
    assert first.out_of_place_time_s == pytest.approx(12.34e-6)
    assert first.in_place_busbw_bytes_per_s == pytest.approx(0.06e9)
    assert log.avg_busbw_bytes_per_s == pytest.approx(0.138333e9)


def test_rows_without_a_header_use_field_counts() -> None:
    text = (
        "some preamble\n"
        "        1024            64   float    12.34    0.08    0.06      0    11.90    0.09"
        "    0.06      0\n"           # 11 fields: no redop, no root (old all_gather)
        "        1024           256   float       0    20.00    0.05    0.05      0"
        "    19.00    0.05    0.05      0\n"   # 12 fields, numeric 4th: root (old broadcast)
        "        1024           256   float     sum    30.00    0.03    0.06      0"
        "    29.00    0.04    0.07      0\n"   # 12 fields, word 4th: redop (old all_reduce)
        "        1024           256   float     sum      -1    40.00    0.03    0.05    N/A\n"
    )
    rows = parse_nccl_log(text).rows
    assert [(r.redop, r.root) for r in rows] == [("none", -1), ("none", 0), ("sum", -1),
                                                 ("sum", -1)]
    assert [r.line for r in rows] == [2, 3, 4, 5]
    assert rows[1].out_of_place_time_s == pytest.approx(20e-6)
    assert rows[2].in_place_busbw_bytes_per_s == pytest.approx(0.07e9)
    assert rows[3].in_place_time_s is None


NEWEST = """\
# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807
# Collective test starting: reduce_scatter_perf
# nThread 1 nGpus 8 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 1
#
# Using devices
#  Rank  0 Group  0 Pid 223120 on cnode2-002 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid 223120 on cnode2-002 device  1 [0000:43:00] NVIDIA H100 80GB HBM3
#
#                               out-of-place                   in-place
#    size  count  type redop root  time algbw busbw #wrong  time algbw busbw #wrong  timestamp
#     (B) (elements)               (us) (GB/s) (GB/s)       (us) (GB/s) (GB/s) %Y-%m-%d %H:%M:%S
  1048576 131072 float  sum  -1 20.51 51.12 44.73     0 20.10 52.17 45.65     0 2025-06-01 10:00:01
  2097152 262144 float  sum  -1 30.02 69.86 61.13     0 29.87 70.21 61.43     0 2025-06-01 10:00:02
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 53.235 OK
#
# Collective test concluded: reduce_scatter_perf
"""


def test_newest_format_with_banner_and_timestamps() -> None:
    log = parse_nccl_log(NEWEST)
    assert log.op == "reduce_scatter"
    assert log.nccl_version == "2.28.7"  # from nccl-library=22807
    assert log.num_ranks == 2
    assert len(log.rows) == 2
    assert log.rows[1].in_place_time_s == pytest.approx(29.87e-6)
    assert log.avg_busbw_bytes_per_s == pytest.approx(53.235e9)


OUT_OF_PLACE_ONLY = """\
#       size         count      type   redop    root     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    85.58   12.25   22.97    N/A
     2097152        524288     float     sum      -1    99.19   21.14   39.64    N/A
"""


def test_out_of_place_only_log() -> None:
    log = parse_nccl_log(OUT_OF_PLACE_ONLY)
    assert len(log.rows) == 2
    row = log.rows[0]
    assert row.in_place_time_s is None
    assert row.in_place_algbw_bytes_per_s is None
    assert row.in_place_busbw_bytes_per_s is None
    assert row.time_s == row.out_of_place_time_s == pytest.approx(85.58e-6)
    assert log.avg_busbw_bytes_per_s is None
    assert log.num_ranks is None and log.gpu_model is None and log.op is None


def test_wrong_column_not_available() -> None:
    text = (
        "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw"
        "  #wrong\n"
        "   8192   2048 float    sum    -1  48.16  0.17  0.32     N/A  46.51  0.18  0.33"
        "     N/A\n"
    )
    (row,) = parse_nccl_log(text).rows
    assert row.out_of_place_busbw_bytes_per_s == pytest.approx(0.32e9)
    assert row.in_place_time_s == pytest.approx(46.51e-6)


def test_wrong_results_are_counted_over_both_halves() -> None:
    """``#wrong`` is kept per row (N/A is 0); it had been checked as a number and dropped."""
    text = (
        "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw"
        "  #wrong\n"
        "   8192   2048 float    sum    -1  48.16  0.17  0.32       3  46.51  0.18  0.33"
        "    4832\n"
        "  16384   4096 float    sum    -1  49.40  0.33  0.62     N/A  48.00  0.34  0.64"
        "       0\n"
    )
    assert [row.wrong_results for row in parse_nccl_log(text).rows] == [4835, 0]


# --- noise ---------------------------------------------------------------------------------

NOISY = """\
Some notes about the cluster. 2 nodes, 8 GPUs each.
```
> mpirun --allow-run-as-root \\
>    -np 2 -x NCCL_DEBUG=INFO \\
>    ./build/sendrecv_perf -b 8 -e 16 -f 2 -g 1
Warning: Permanently added 'worker-1' (ED25519) to the list of known hosts.
Defaulted container "launcher" out of: launcher, init (init)
\x1b[32m# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5\x1b[0m
> # Using devices
>  #  Rank  0 Group  0 Pid  101 on worker-0 device  0 [0x07] NVIDIA A100-SXM4-40GB
>  #  Rank  1 Group  0 Pid  201 on worker-1 device  0 [0x07] NVIDIA A100-SXM4-40GB
worker-0:101:101 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
worker-0:101:101 [0] NCCL INFO NCCL version 2.19.3+cuda12.3
worker-0:101:130 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 7000 - Init COMPLETE
#
#\tsize\tcount\ttype\tredop\troot\ttime\talgbw\tbusbw\t#wrong\ttime\talgbw\tbusbw\t#wrong
[1,0]<stdout>:        8        2  float  sum   -1  20.10  0.00  0.00    0  19.90  0.00  0.00    0
[worker-0:00101] 15 more processes have sent help message help-mpi-btl.txt / warning
[pod/worker-0/launcher] 3 more processes have sent help message help-mpi-btl.txt
mpirun noticed that the job aborted, but has no info as to the process that caused it
worker-0:  \t16\t4\tfloat\tsum\t-1\t21.50\t0.00\t0.00\t0\t21.00\t0.00\t0.00\t0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0
worker-0:101:101 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 7000 - Destroy COMPLETE
```
The table above shows 16 bytes take 21.5 us.
"""


def test_noise_around_and_inside_the_table() -> None:
    log = parse_nccl_log(NOISY, source="pasted.md")
    assert [row.size_bytes for row in log.rows] == [8, 16]
    assert [row.line for row in log.rows] == [17, 21]
    assert log.rows[1].out_of_place_time_s == pytest.approx(21.5e-6)
    assert log.op == "sendrecv"
    assert log.num_ranks == 2
    assert log.gpu_model == "NVIDIA A100-SXM4-40GB"
    assert log.nccl_version == "2.19.3+cuda12.3"
    assert log.avg_busbw_bytes_per_s == 0.0
    assert len(log.sections) == 1


def test_ranks_from_mpirun_when_no_device_lines() -> None:
    text = (
        "mpirun -np 4 --map-by ppr:4:node ./all_reduce_perf -b 8 -e 8 -g 2 -n 100\n"
        "           8             2     float     sum      -1    20.10    0.00    0.00"
        "      0    19.90    0.00    0.00      0\n"
    )
    log = parse_nccl_log(text)
    assert log.op == "all_reduce"
    assert log.num_ranks == 8  # 4 processes x 2 GPUs; "-n 100" (iterations) is not -np


def test_srun_label_prefixes_are_stripped() -> None:
    # srun --label (srun -l) prepends each line with its task number, as Alps' logs do.
    text = (
        " 0: #  Rank  0 Group  0 Pid  51455 on  nid005896 device  0 [0x01] NVIDIA GH200 120GB\n"
        " 0: #  Rank  1 Group  0 Pid  51456 on  nid005896 device  0 [0x01] NVIDIA GH200 120GB\n"
        " 0:            8             2     float     sum      -1    30.94    0.00    0.00"
        "      0    30.68    0.00    0.00      0\n"
        "12:         1024           256     float     sum      -1    39.05    0.03    0.05"
        "      0    38.44    0.03    0.05      0\n"
    )
    log = parse_nccl_log(text)
    assert [row.size_bytes for row in log.rows] == [8, 1024]
    assert log.rows[1].in_place_time_s == pytest.approx(38.44e-6)
    assert log.num_ranks == 2 and log.gpu_model == "NVIDIA GH200 120GB"


def test_runs_split_on_new_headers() -> None:
    row = ("        1024           256     float     sum      -1    {t}    0.05    0.09"
           "      0    {t}    0.05    0.09      0\n")
    text = (
        "# Collective test starting: all_reduce_perf\n"
        "# Using devices\n"
        "#  Rank  0 Group  0 Pid 1 on a device  0 [0x01] NVIDIA H100\n"
        + row.format(t="20.00") + row.format(t="21.00")
        + "# Avg bus bandwidth    : 0.09\n"
        "# Collective test starting: all_gather_perf\n"
        "# Using devices\n"
        "#  Rank  0 Group  0 Pid 1 on a device  0 [0x01] NVIDIA H100\n"
        "#  Rank  1 Group  0 Pid 2 on a device  1 [0x02] NVIDIA H100\n"
        + row.format(t="30.00")
    )
    first, second = split_nccl_runs(text)
    assert (first.op, first.num_ranks, len(first.rows)) == ("all_reduce", 1, 2)
    assert first.avg_busbw_bytes_per_s == pytest.approx(0.09e9)
    assert (second.op, second.num_ranks, len(second.rows)) == ("all_gather", 2, 1)
    assert second.avg_busbw_bytes_per_s is None
    assert second.rows[0].line == 11
    whole = parse_nccl_log(text)
    assert whole.op is None and len(whole.rows) == 3


def _swept(header: str, sizes: list[int], trailer: bool) -> str:
    """A one-run log whose nThread line declares ``header``'s sweep, with a row per size."""
    rows = "".join(f"{size:>12} {size // 4:>10} float sum -1 50.00 0.05 0.09 0 50.00 0.05 "
                   "0.09 0\n" for size in sizes)
    return (f"# nThread 1 nGpus 1 {header} warmup iters: 5 iters: 20\n" + rows
            + ("# Avg bus bandwidth    : 0.09\n" if trailer else ""))


@pytest.mark.parametrize(("header", "sizes", "trailer", "cut_short"), [
    # factor 2 from 1 MiB to 16 MiB: a table that stops at 4 MiB, with no trailer, is cut
    ("minBytes 1048576 maxBytes 16777216 step: 2(factor)", [MIB, 2 * MIB, 4 * MIB], False,
     True),
    ("minBytes 1048576 maxBytes 16777216 step: 2(factor)", [MIB, 4 * MIB, 16 * MIB], False,
     False),
    # its last size need not be maxBytes: 8 MiB·2 > 12 MiB ends the sweep
    ("minBytes 1048576 maxBytes 12582912 step: 2(factor)", [MIB, 8 * MIB], False, False),
    # the trailer says the run finished (whatever -b/-e it ran with)
    ("minBytes 1048576 maxBytes 16777216 step: 2(factor)", [MIB, 2 * MIB], True, False),
    # a byte step: 3 MiB + 1 MiB is still within 4 MiB
    ("minBytes 1048576 maxBytes 4194304 step: 1048576(bytes)", [MIB, 2 * MIB, 3 * MIB],
     False, True),
    ("minBytes 1048576 maxBytes 4194304 step: 1048576(bytes)", [MIB, 4 * MIB], False, False),
])
def test_a_table_that_stops_before_its_sweep_ends_is_cut_short(
        header: str, sizes: list[int], trailer: bool, cut_short: bool) -> None:
    """The nThread line's maxBytes and step bound the sweep nccl-tests runs; a table whose
    next size would still be in it, with no ``# Avg bus bandwidth`` after it, was cut."""
    log = parse_nccl_log(_swept(header, sizes, trailer))
    assert log.max_bytes == int(header.split()[3])
    assert log.cut_short is cut_short
    assert log.sections[0].cut_short is cut_short


def test_a_real_log_copied_in_part_is_cut_short(nccl_logs: Path) -> None:
    """The OCI log whole reaches its maxBytes (8 GiB); its first 40 lines stop at 4 KiB."""
    text = (nccl_logs / OCI).read_text(encoding="utf-8")
    whole = parse_nccl_log(text)
    assert (whole.max_bytes, whole.cut_short) == (8 * GIB, False)
    part = parse_nccl_log("\n".join(text.splitlines()[:40]) + "\n")
    assert max(row.size_bytes for row in part.rows) < 8 * GIB
    assert (part.max_bytes, part.cut_short) == (8 * GIB, True)


def test_reads_a_path_given_as_str_or_path(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    path.write_text(OUT_OF_PLACE_ONLY.replace("\n", "\r\n"))
    assert parse_nccl_log(path).rows == parse_nccl_log(str(path)).rows
    assert parse_nccl_log(path).source == str(path)
    assert len(parse_nccl_log(path).rows) == 2


# --- bad input -----------------------------------------------------------------------------


def test_malformed_number_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.log"
    path.write_text(OUT_OF_PLACE_ONLY.replace("99.19", "9x.19"))
    with pytest.raises(ParseError) as caught:
        parse_nccl_log(path)
    error = caught.value
    assert error.line == 4
    assert error.source == str(path)
    text = str(error)
    assert f"{path}:4" in text
    assert "time" in text and "'9x.19'" in text and "microseconds" in text


def test_too_few_fields_after_the_table_started() -> None:
    text = OUT_OF_PLACE_ONLY + "     4194304       1048576     float     sum\n"
    with pytest.raises(ParseError) as caught:
        parse_nccl_log(text, source="short.log")
    assert caught.value.line == 5
    assert "short.log:5" in str(caught.value)
    assert "expected 9 fields" in str(caught.value)


def test_truncated_row_without_a_header() -> None:
    text = ("     1048576        262144     float     sum      -1    85.58   12.25   22.97    0\n"
            "     2097152        524288     float     sum      -1    99.19\n")
    with pytest.raises(ParseError) as caught:
        parse_nccl_log(text)
    assert caught.value.line == 2
    assert "found 6 fields" in str(caught.value)


def test_negative_time_is_rejected() -> None:
    text = OUT_OF_PLACE_ONLY.replace("85.58", "-85.5")
    with pytest.raises(ParseError, match="not negative"):
        parse_nccl_log(text)


def test_a_table_saved_as_csv_reads_as_its_text() -> None:
    csv = ("size,count,type,redop,root,time,algbw,busbw,#wrong,time,algbw,busbw,#wrong\n"
           "1048576,262144,float,sum,-1,85.58,12.25,22.97,0,84.50,12.41,23.27,0\n"
           "2097152,524288,float,sum,-1,99.19,21.14,39.64,0,98.10,21.38,40.08,0\n")
    log = parse_nccl_log(csv)
    assert [(r.size_bytes, r.out_of_place_time_s, r.in_place_time_s) for r in log.rows] == [
        (1048576, pytest.approx(85.58e-6), pytest.approx(84.50e-6)),
        (2097152, pytest.approx(99.19e-6), pytest.approx(98.10e-6))]
    with pytest.raises(ParseError, match="no nccl-tests rows"):
        parse_nccl_log("name,size,count\nx,1,2\n")  # another CSV: no table


def test_a_time_of_zero_for_bytes_moved_is_refused_at_its_line() -> None:
    text = OUT_OF_PLACE_ONLY.replace("99.19", " 0.00")
    with pytest.raises(ParseError, match="time is 0 us for 2097152 bytes") as caught:
        parse_nccl_log(text)
    assert caught.value.line == 4


def test_a_row_of_zero_bytes_may_take_no_time() -> None:
    empty = "           0             0     float     sum      -1     0.00    0.00    0.00    N/A\n"
    log = parse_nccl_log(OUT_OF_PLACE_ONLY + empty)
    assert [r.size_bytes for r in log.rows] == [1048576, 2097152, 0]
    assert log.rows[-1].time_s == 0.0


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_text("")
    with pytest.raises(ParseError) as caught:
        parse_nccl_log(path)
    assert "no nccl-tests rows were found" in str(caught.value)
    assert "a row looks like" in str(caught.value)
    assert str(path) in str(caught.value)
    with pytest.raises(ParseError, match="no nccl-tests rows"):
        parse_nccl_log("")


def test_a_profiler_trace_is_named_with_the_commands_that_read_it(tmp_path: Path) -> None:
    trace = json.dumps({"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "k"}]})
    plain = tmp_path / "rank0.json"
    plain.write_text(trace)
    packed = tmp_path / "rank0.json.gz"
    packed.write_bytes(gzip.compress(trace.encode()))
    for path, kind in ((plain, "a PyTorch profiler (Kineto) trace"), (packed, "gzip-compressed")):
        with pytest.raises(ParseError, match="no nccl-tests rows were found") as caught:
            parse_nccl_log(path)
        assert kind in str(caught.value)
        assert "'distsim validate trace'" in str(caught.value)
        assert "a row looks like" not in str(caught.value)


def test_header_only_file() -> None:
    header = NEWEST.split("\n  1048576")[0] + "\n"
    assert "#wrong" in header and "20.51" not in header
    with pytest.raises(ParseError, match="no nccl-tests rows were found"):
        split_nccl_runs(header)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "run.log"
    with pytest.raises(ParseError) as caught:
        parse_nccl_log(missing)
    assert str(missing) in str(caught.value)
    assert "does not exist" in str(caught.value)


def test_directory_is_not_a_log(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="directory"):
        parse_nccl_log(tmp_path)


def test_unreadable_average_is_a_parse_error() -> None:
    with pytest.raises(ParseError) as caught:
        parse_nccl_log(OUT_OF_PLACE_ONLY + "# Avg bus bandwidth    : lots\n")
    assert caught.value.line == 5


@pytest.mark.parametrize("junk", [
    "\x00\x01\x02",
    "#" * 10_000,
    "1 2 float",
    "\n".join(["8 2 float sum -1 1 1 1 0 1 1 1 0"] * 3) + "\n8 2 float sum -1 1 1 1 0 1 1",
    "\ufeff# nThread 1 nGpus 1\n\xff\xfe",
])
def test_junk_ends_in_a_distsim_error_or_a_log(junk: str) -> None:
    try:
        parse_nccl_log(junk + "\n")
    except DistsimError as error:
        assert str(error)


# --- property: rows printed as nccl-tests prints them read back ----------------------------


def _nccl_float(value: float, width: int) -> tuple[str, float]:
    """Format as nccl-tests' getFloatStr does; also the largest rounding error."""
    for decimals in (2, 1, 0):
        text = f"{value:{width}.{decimals}f}"
        if len(text) <= width:
            return text, 0.5 * 10.0**-decimals
    text = f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"
    return text, abs(value) * (0.05 if width >= 7 else 0.5)


_values = st.floats(min_value=0.0, max_value=1e7, allow_nan=False, allow_infinity=False)
# A time nccl-tests would print as 0.00 is refused for a row that moves bytes (tested above).
_times = st.floats(min_value=0.01, max_value=1e7, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(min_value=0, max_value=2**44),
    times=st.tuples(_times, _times),
    algbws=st.tuples(_values, _values),
    busbws=st.tuples(_values, _values),
    columns=st.sampled_from(["redop root", "redop", ""]),
    in_place=st.booleans(),
    with_header=st.booleans(),
    wrong=st.sampled_from(["0", "N/A", "3", "0e+00"]),
    decoration=st.sampled_from(["", "> ", "\t", "node-7: ", "[1,0]<stdout>:"]),
)
def test_formatted_rows_read_back(size: int, times: tuple[float, float],
                                  algbws: tuple[float, float], busbws: tuple[float, float],
                                  columns: str, in_place: bool, with_header: bool,
                                  wrong: str, decoration: str) -> None:
    halves = 2 if in_place else 1
    extra = {"redop root": ["sum", "-1"], "redop": ["max"], "": []}[columns]
    fields = [f"{size:12d}", f"{size // 4:12d}", f"{'float':>8s}", *extra]
    expected: list[tuple[float, float, float, float, float, float]] = []
    for half in range(halves):
        time_text, time_tol = _nccl_float(times[half], 7)
        alg_text, alg_tol = _nccl_float(algbws[half], 6)
        bus_text, bus_tol = _nccl_float(busbws[half], 6)
        fields += [time_text, alg_text, bus_text, f"{wrong:>6s}"]
        expected.append((times[half], time_tol, algbws[half], alg_tol, busbws[half], bus_tol))
    header = ""
    if with_header:
        half_names = "time algbw busbw #wrong"
        header = f"#  size count type {columns} " + " ".join([half_names] * halves) + "\n"
    text = header + decoration + "  ".join(fields) + "\n"

    (row,) = parse_nccl_log(text).rows
    assert row.size_bytes == size and row.count == size // 4 and row.dtype == "float"
    assert row.redop == ("none" if not extra else extra[0])
    assert row.root == -1
    assert row.line == (2 if with_header else 1)
    got = [(row.out_of_place_time_s, row.out_of_place_algbw_bytes_per_s,
            row.out_of_place_busbw_bytes_per_s)]
    if in_place:
        got.append((row.in_place_time_s, row.in_place_algbw_bytes_per_s,
                    row.in_place_busbw_bytes_per_s))
    else:
        assert row.in_place_time_s is None and row.time_s == row.out_of_place_time_s
    for (time_s, alg, bus), (t, t_tol, a, a_tol, b, b_tol) in zip(got, expected, strict=True):
        assert time_s is not None and alg is not None and bus is not None
        assert abs(time_s * 1e6 - t) <= t_tol * (1 + 1e-9) + 1e-9 * t
        assert abs(alg / 1e9 - a) <= a_tol * (1 + 1e-9) + 1e-9 * a
        assert abs(bus / 1e9 - b) <= b_tol * (1 + 1e-9) + 1e-9 * b


_LOG_LINES = st.sampled_from([
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5",
    "# Using devices",
    "#  Rank  0 Group  0 Pid  1 on host device  0 [0x07] NVIDIA A100-SXM4-40GB",
    "#  Rank  1 Group  0 Pid  2 on host device  1 [0x0b] NVIDIA A100-SXM4-40GB",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong",
    "#  size  count  type  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong",
    "           8             2     float     sum      -1    36.47    0.00    0.00      0",
    "          16             4     float    38.86    0.00    0.00    N/A   35.65  0.00  0.00  0",
    "          32             8     float     sum      -1    38.53",
    "# Out of bounds values : 0 OK",
    "# Avg bus bandwidth    : 66.4834",
    "# Collective test starting: alltoall_perf",
    "mpirun -np 2 ./all_reduce_perf -b 8 -e 16",
    "NCCL version 2.18.3+cuda12.2",
    "```",
    "",
]) | st.text(max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LOG_LINES, max_size=25))
def test_any_text_gives_a_log_or_a_distsim_error(lines: list[str]) -> None:
    try:
        log = parse_nccl_log("\n".join([*lines, ""]))
    except DistsimError as error:
        assert str(error)
        return
    assert log.rows and log.sections
    assert sum(len(run.rows) for run in log.sections) == len(log.rows)
    for row in log.rows:
        assert row.out_of_place_time_s >= 0 and row.out_of_place_busbw_bytes_per_s >= 0
