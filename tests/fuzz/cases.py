"""Malformed input of every family, generated from a seed, fed to the ``distsim`` command.

Each case is a hostile version of a valid input and the command that reads it:

=================  ============================================================
family             command
=================  ============================================================
``scenario``       ``distsim run scenario.yaml``
``disruptions``    ``distsim run disrupted.yaml`` (``faults``, ``stragglers``, ``goodput``)
``cluster``        ``distsim nccl-tests --cluster cluster.yaml -b 1M -e 1M``
``set``            ``distsim run tiny.yaml --set KEY=VALUE``
``nccl_log``       ``distsim validate nccl log.txt --cluster dgx-h100``
``kineto``         ``distsim trace summary rank0.json``
``cost_table``     ``distsim run tiny.yaml --set compute.costs=costs.csv|yaml``
=================  ============================================================

Mutations: text cut short, bytes flipped, hostile tokens inserted (huge and full-width
numbers, NaN, unicode, bytes that are not UTF-8), numbers or words replaced, lines dropped or
doubled, nesting thousands deep, an alias bomb, and — for YAML and JSON — a value of the
parsed document replaced by a hostile one (a 5,000-digit integer, ``1e30``, ``-1``,
``0``, ``.nan``, a list where a number goes, ...) or an unknown key added.

:func:`run_batch` runs cases in this process under a per-case time cap
(``signal.alarm``) and sorts each outcome: ``clean`` (exit 2 with one
``distsim: error:`` line naming the file, or ``--set``), ``accepted`` (the mutation is
valid input: exit 0), ``unnamed`` (a clean error that does not name its source),
``traceback``, ``timeout`` or ``memory``.  ``python -m tests.fuzz.cases`` runs a batch
under a memory cap (``RLIMIT_AS``) and prints the counts as JSON; ``tests/fuzz/test_fuzz.py``
runs ~200 cases in CI, ``benchmarks/fuzz.py`` thousands.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import re
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FAMILIES = ("scenario", "cluster", "set", "nccl_log", "kineto", "cost_table", "disruptions")

TINY = """\
name: tiny
cluster: {preset: switch, gpus: 8, link_bandwidth: "100 GB/s", link_latency: "1 us"}
model: {layers: 4, hidden: 512, heads: 8, seq_len: 256, vocab: 1000}
parallelism: {tp: 2, pp: 2, dp: 2, schedule: 1f1b}
training: {micro_batch: 1, global_batch: 8, recompute: none, precision: bf16}
compute: {gpu: a100-80gb, costs: roofline, matmul_efficiency: 0.8}
communication: {algorithm: auto, protocol: auto}
simulation: {fidelity: coflow, seed: 0}
"""

# Issue 15's keys: faults, stragglers drawn and by name, goodput.
DISRUPTED = """\
name: disrupted
cluster: {preset: dgx-a100, nodes: 2, fabric: fat-tree}
model: {layers: 4, hidden: 512, heads: 8, seq_len: 256, vocab: 1000}
parallelism: {tp: 2, pp: 2, dp: 4}
training: {micro_batch: 1, global_batch: 8}
compute: {gpu: a100-80gb}
faults:
  - {target: nic, name: n1.nic3, kind: down}
  - {target: nic, name: n0.nic1, kind: degraded, bandwidth_factor: 0.5, added_latency_s: "2 us"}
stragglers:
  n0.gpu3: 1.2
  jitter: {distribution: lognormal, sigma: 0.05}
  slow_nodes: {rate: 0.1, factor: 1.3}
goodput:
  mtbf: {gpu: "50000 h", node: "20000 h"}
  restart: "10 min"
"""

CLUSTER = """\
preset: dgx-a100
nodes: 2
nic: {bandwidth: "200 Gbps", count: 8}
fabric: {kind: fat-tree, technology: infiniband, oversubscription: "2:1"}
"""

NCCL_LOG = """\
# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 8 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 1
#
# Using devices
""" + "".join(f"#  Rank  {r} Group  0 Pid 223120 on cnode2-002 device  {r} [0000:1b:00] "
              "NVIDIA H100 80GB HBM3\n" for r in range(8)) + """\
#
#                               out-of-place                   in-place
#    size  count  type redop root  time algbw busbw #wrong  time algbw busbw #wrong
#     (B) (elements)               (us) (GB/s) (GB/s)       (us) (GB/s) (GB/s)
  1048576 262144 float  sum  -1 20.51 51.12 89.46     0 20.10 52.17 91.30     0
  2097152 524288 float  sum  -1 30.02 69.86 122.3     0 29.87 70.21 122.9     0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 106.5 OK
"""

KINETO = json.dumps({
    "schemaVersion": 1,
    "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
    "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
    "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1,
         "ts": 0, "dur": 900},
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": 10,
         "dur": 300, "args": {"device": 0, "stream": 7, "correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
         "pid": 0, "tid": 20, "ts": 320, "dur": 200,
         "args": {"device": 0, "stream": 20, "correlation": 6}},
    ],
}, indent=1)

COST_CSV = """\
# software: megatron-lm
# date: 2024-05-01
# source: fuzz base
# gpu: a100-80gb
kind,pass,micro_batch,seq_len,hidden,tp,time_s
transformer_layer,fwd,1,256,512,2,0.0001
transformer_layer,bwd,1,256,512,2,0.0002
"""

# Values a hostile or careless file holds where a number or a name goes.
HOSTILE_TOKENS = (
    "9" * 5000, "9" * 401, "-1", "0", "1e30", "1.0e+30", "2e308", "nan", ".nan", "inf",
    "-.inf", "２００", "١٢", "１e3", "\u202e", "\x00", "\ufeff", "💥", "!!float x",
    "!!int 12x", "*undefined", "&a [*a]", "{", "]]", "'", '"', "\\", "%", "@", "`",
    "<<: *x", "? ", "- ", "{a: 1}", "[1, 2]", "null", "true", "x" * 10000, "1_000",
    "0x10", "0o17", "1:2:3", "2025-01-01", "   ", "\t", "\r\n", "18446744073709551617",
)
HOSTILE_VALUES: tuple[Any, ...] = (
    10**400, 10**30, 2**63, -1, 0, -0.0, float("nan"), float("inf"), 1e-300, 1.5, True,
    None, "", "x" * 5000, "２００ Gbps", [], {}, [1, 2], {"a": {"b": {"c": 1}}},
    "1e999 GB/s", "-5 us", "NaN", "∞",
)
SET_KEYS = (
    "model.layers", "model.hidden", "model.heads", "model.seq_len", "model.vocab",
    "model.ffn_hidden", "model.kv_heads", "model.experts", "model.position",
    "model.attention_window", "model.attention_window.tokens",
    "model.attention_window.full_every",
    "training.global_batch", "training.micro_batch", "training.recompute",
    "training.recompute_modules", "training.activation_func_fp8_input_store",
    "parallelism.tp", "parallelism.pp", "parallelism.dp", "parallelism.interleave",
    "parallelism.schedule", "cluster.nodes", "cluster.gpus", "cluster.link_bandwidth",
    "cluster.link_latency", "cluster.preset", "communication.chunk_bytes.simple",
    "communication.link_efficiency.nvlink", "communication.algorithm",
    "compute.matmul_efficiency", "compute.gpu", "compute.cross_entropy", "compute.comm_sms",
    "communication.deepep_sm_rate", "communication.deepep_sm_token_time", "simulation.seed",
    "simulation.fidelity",
    "stragglers", "name", "unknown.key", "model", "cluster", "a..b", "model[3]", "",
)


@dataclass(frozen=True, slots=True)
class Case:
    """One input: its family, the mutation that made it, the file (name, bytes) it
    writes and the ``distsim`` arguments (``{file}`` stands for the file's path)."""

    family: str
    mutation: str
    file_name: str
    data: bytes
    argv: tuple[str, ...]


# --------------------------------------------------------------------------- mutations


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[:rng.randrange(len(data) + 1)]


def _flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if out:
            out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def _insert(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.choice(HOSTILE_TOKENS).encode("utf-8") + data[at:]


def _replace(rng: random.Random, data: bytes, pattern: bytes) -> bytes:
    """One match of ``pattern`` replaced by a hostile token (else one inserted)."""
    spans = [m.span() for m in re.finditer(pattern, data)]
    if not spans:
        return _insert(rng, data)
    start, end = rng.choice(spans)
    return data[:start] + rng.choice(HOSTILE_TOKENS).encode("utf-8") + data[end:]


def _number(rng: random.Random, data: bytes) -> bytes:
    return _replace(rng, data, rb"\d+(?:\.\d+)?")


def _token(rng: random.Random, data: bytes) -> bytes:
    """A whitespace-separated word replaced by a hostile one (a log's header count, a
    row's size, a YAML value)."""
    return _replace(rng, data, rb"[^\s]+")


def _lines(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    kind = rng.choice(("drop", "double", "swap"))
    if kind == "drop":
        del lines[i]
    elif kind == "double":
        lines.insert(i, lines[i])
    else:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def _deep(rng: random.Random, data: bytes) -> bytes:
    depth = rng.choice((90, 1000, 100_000))
    at = rng.randrange(len(data) + 1)
    return data[:at] + b"[" * depth + b"]" * depth + data[at:]


def _not_utf8(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + bytes(rng.choice((b"\xff\xfe", b"\xc3\x28", b"\x80", b"\xed\xa0\x80"))) \
        + data[at:]


_TEXT_MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "truncate": _truncate, "flip": _flip, "insert": _insert, "number": _number,
    "token": _token,
    "lines": _lines, "deep": _deep, "not_utf8": _not_utf8,
    "empty": lambda rng, data: b"",
}


def _leaf_paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaf_paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaf_paths(value, (*path, i))


def _replace_value(rng: random.Random, doc: Any) -> Any:
    """``doc`` with one value (or the whole) replaced by a hostile one, or a key added."""
    paths = list(_leaf_paths(doc))
    path = rng.choice(paths)
    value = rng.choice(HOSTILE_VALUES)
    if not path:
        return value
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if isinstance(parent, dict) and rng.random() < 0.2:
        parent[rng.choice(("unknwon", "layer", "nodes ", "ÿ", "1"))] = value
    else:
        parent[path[-1]] = value
    return doc


def _yaml_value(rng: random.Random, text: str) -> bytes:
    doc = _replace_value(rng, yaml.safe_load(text))
    # (yaml writes floats nan/inf as .nan/.inf; a 400-digit int as its digits)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10**6).encode()


def _json_value(rng: random.Random, text: str) -> bytes:
    doc = _replace_value(rng, json.loads(text))
    huge = "9" * rng.choice((400, 5000))  # json.dumps refuses ints past 4,300 digits
    encoded = json.dumps(doc, default=str).replace("1000000000000000000000000000000",
                                                   huge, 1)
    return encoded.encode("utf-8")


def _alias_bomb(rng: random.Random, text: str) -> bytes:
    bomb = 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for i in range(1, rng.randint(6, 12)):
        bomb += f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    return (text + bomb).encode("utf-8")


# --------------------------------------------------------------------------- cases

_BASES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # family: (file name, base text, argv with {file} and {tiny})
    "scenario": ("scenario.yaml", TINY, ("run", "{file}")),
    "disruptions": ("disrupted.yaml", DISRUPTED, ("run", "{file}")),
    "cluster": ("cluster.yaml", CLUSTER,
                ("nccl-tests", "--cluster", "{file}", "-b", "1M", "-e", "1M")),
    "nccl_log": ("log.txt", NCCL_LOG,
                 ("validate", "nccl", "{file}", "--cluster", "dgx-h100")),
    "kineto": ("rank0.json", KINETO, ("trace", "summary", "{file}")),
    "cost_table": ("costs.csv", COST_CSV,
                   ("run", "{tiny}", "--set", "compute.costs={file}")),
}


def _file_case(rng: random.Random, family: str) -> Case:
    name, text, argv = _BASES[family]
    structured = family in ("scenario", "disruptions", "cluster", "kineto")
    choices = [*_TEXT_MUTATIONS, *(("value",) * 4 if structured else ())]
    if family in ("scenario", "disruptions", "cluster"):
        choices.append("alias_bomb")
    mutation = rng.choice(choices)
    if mutation == "value":
        data = (_json_value if family == "kineto" else _yaml_value)(rng, text)
    elif mutation == "alias_bomb":
        data = _alias_bomb(rng, text)
    else:
        data = _TEXT_MUTATIONS[mutation](rng, text.encode("utf-8"))
    return Case(family, mutation, name, data, argv)


def _set_case(rng: random.Random) -> Case:
    key = rng.choice(SET_KEYS)
    value = rng.choice((*HOSTILE_TOKENS, *(str(v) for v in HOSTILE_VALUES)))
    if rng.random() < 0.2:
        value = _TEXT_MUTATIONS["flip"](rng, value.encode("utf-8")).decode("utf-8", "replace")
    return Case("set", "value", "tiny.yaml", TINY.encode(),
                ("run", "{tiny}", "--set", f"{key}={value}"))


def base_cases() -> list[Case]:
    """Every family's input unmutated: each must run (exit 0), or the fuzz proves nothing."""
    cases = [Case(f, "none", name, text.encode(), argv) for f, (name, text, argv)
             in _BASES.items()]
    cases.append(Case("set", "none", "tiny.yaml", TINY.encode(),
                      ("run", "{tiny}", "--set", "model.layers=8")))
    return cases


def generate(count: int, seed: int = 0) -> list[Case]:
    """``count`` cases, the families in turn, mutations drawn from ``seed``."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        family = FAMILIES[i % len(FAMILIES)]
        cases.append(_set_case(rng) if family == "set" else _file_case(rng, family))
    return cases


# --------------------------------------------------------------------------- running


class _Timeout(BaseException):
    """Raised by the alarm: a BaseException, so that no ``except Exception`` eats it."""


def _on_alarm(_signum: int, _frame: Any) -> None:
    raise _Timeout


def run_case(case: Case, folder: Path, cap_s: int) -> tuple[str, str]:
    """Run ``case`` (files in ``folder``) with a time cap; ``(outcome, message)``."""
    from distsim_gpu.scenarios.cli.main import main

    path = folder / case.file_name
    path.write_bytes(case.data)
    tiny = folder / "tiny.yaml"
    if case.family != "scenario":
        tiny.write_text(TINY, encoding="utf-8")
    argv = [a.replace("{file}", str(path)).replace("{tiny}", str(tiny)) for a in case.argv]
    err, out = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(cap_s)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                status = main(argv)
            except SystemExit as exit_:  # argparse: a usage error
                status = exit_.code if isinstance(exit_.code, int) else 2
    except _Timeout:
        return "timeout", " ".join(argv)[:300]
    except MemoryError:
        return "memory", " ".join(argv)[:300]
    except BaseException as error:  # (what the fuzzer is looking for)
        return "traceback", f"{type(error).__name__}: {error}"[:300]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return _judge(case, status, err.getvalue(), path)


def _judge(case: Case, status: int, err: str, path: Path) -> tuple[str, str]:
    if "Traceback" in err:
        return "traceback", err[-300:]
    if status == 0:
        return "accepted", ""
    # A --set value's error names --set, or the scenario where a derived check failed.
    named = ("--set", "tiny.yaml") if case.family == "set" else (path.name,)
    if status == 2 and err.startswith(("distsim: error: ", "usage:")):
        clean = err.startswith("usage:") or any(n in err for n in named)
        return ("clean" if clean else "unnamed"), err.strip()[:300]
    return "traceback", f"status {status}: {err[-300:]}"


def run_batch(cases: list[Case], *, cap_s: int = 10) -> dict[str, Any]:
    """Run every case; counts by outcome and family, and the first few bad ones."""
    counts: Counter[str] = Counter()
    by_family: dict[str, Counter[str]] = {f: Counter() for f in FAMILIES}
    bad: list[dict[str, str]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="distsim-fuzz-") as tmp:
        for i, case in enumerate(cases):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            outcome, message = run_case(case, folder, cap_s)
            counts[outcome] += 1
            by_family[case.family][outcome] += 1
            if outcome not in ("clean", "accepted") and len(bad) < 20:
                bad.append({"case": str(i), "family": case.family,
                            "mutation": case.mutation, "outcome": outcome,
                            "message": message})
    return {"cases": len(cases), "counts": dict(counts),
            "by_family": {f: dict(c) for f, c in by_family.items()}, "bad": bad,
            "wall_s": round(time.perf_counter() - started, 2)}


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.fuzz.cases --count N --seed S``: one batch, counts as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cap-s", type=int, default=10, help="time cap per case")
    parser.add_argument("--mem-gib", type=float, default=4.0,
                        help="address-space cap of this process (RLIMIT_AS)")
    args = parser.parse_args(argv)
    cap = int(args.mem_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    report = run_batch(generate(args.count, args.seed), cap_s=args.cap_s)
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
