"""Malformed input of the newer readers: Chakra ETs, ``validate runs`` tables and maps, and
the scenario sections beside the model (jobs, faults, MoE routing, per-operator sharding,
offload, stragglers).

=================  ================================================================
family             command
=================  ================================================================
``chakra_et``      ``distsim trace chakra DIR --cluster dgx-a100`` (binary ``.et``)
``chakra_json``    ``distsim trace chakra DIR --cluster dgx-a100`` (Chakra JSON)
``runs_table``     ``distsim validate runs runs.csv --map map.yaml --workers 1``
``runs_map``       the same, the map mutated
``sections``       ``distsim run s.yaml`` for a MoE scenario, a per-operator sharded
                   one, an offloaded one and a two-job one (one drawn per case)
``nccl_xml``       ``distsim topology import topo.xml -o out.yaml`` (NCCL topology XML)
``ibnetdiscover``  ``distsim topology import fabric.ibnet -o out.yaml --node dgx-a100``
``topo_matrix``    ``distsim topology import topo.txt -o out.yaml`` (nvidia-smi topo -m)
=================  ================================================================

Each case is a :class:`~tests.fuzz.cases.Case` of :mod:`tests.fuzz.cases` (its mutations,
its runner and its judge) plus the files beside the mutated one (a second rank's ET, the
map or the table); an error naming any of the case's files is clean.  Binary ETs are also
rebuilt with one hostile attribute or field (a NaN or infinite duration, a group beyond
the job, a wire type of another kind, an id past 64 bits).  ``python -m
tests.fuzz.read_cases`` runs a batch under a memory cap and prints the counts as JSON;
``tests/fuzz/test_fuzz.py`` runs a few dozen in CI, ``benchmarks/fuzz.py --surfaces read``
thousands.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distsim_gpu.measured.chakra import ChakraNode, ChakraTrace, encode_et
from distsim_gpu.measured.protowire import encode_bytes, encode_delimited, encode_varint_field

from tests.fuzz.cases import (
    _TEXT_MUTATIONS,
    HOSTILE_VALUES,
    Case,
    _json_value,
    _yaml_value,
    run_case,
)

READ_FAMILIES = ("chakra_et", "chakra_json", "runs_table", "runs_map", "sections",
                 "nccl_xml", "ibnetdiscover", "topo_matrix")
_DUMPS = Path(__file__).resolve().parents[1] / "topology" / "dumps"
# The topology importers' families: (file name, the unmutated dump, argv).
_IMPORT = ("topology", "import", "{file}", "-o", "{dir}/out.yaml")
IMPORT_BASES: dict[str, tuple[str, bytes, tuple[str, ...]]] = {
    "nccl_xml": ("topo.xml", (_DUMPS / "dgx-h100.topo.xml").read_bytes(), _IMPORT),
    "ibnetdiscover": ("fabric.ibnet", (_DUMPS / "two-dgx-a100.ibnetdiscover").read_bytes(),
                      (*_IMPORT, "--node", "dgx-a100")),
    "topo_matrix": ("topo.txt", (_DUMPS / "dgx-h100.topo.txt").read_bytes(), _IMPORT),
}
CHAKRA_ARGV = ("trace", "chakra", "{dir}", "--cluster", "dgx-a100")
RUNS_ARGV = ("validate", "runs", "{dir}/runs.csv", "--map", "{dir}/map.yaml",
             "--workers", "1")


@dataclass(frozen=True, slots=True)
class ReadCase:
    """A case and the unmutated files written beside it (name, bytes)."""

    case: Case
    beside: tuple[tuple[str, bytes], ...] = ()


# --------------------------------------------------------------------------- Chakra


def _chakra_nodes(rank: int) -> tuple[ChakraNode, ...]:
    peer = 1 - rank
    send = 5 if rank == 0 else 6
    return (
        ChakraNode(0, "gemm", 4, duration_micros=120, attrs={"is_cpu_op": False}),
        ChakraNode(1, "allreduce", 7, data_deps=(0,),
                   attrs={"comm_type": 0, "comm_size": 1 << 20, "pg_ranks": [0, 1]}),
        ChakraNode(2, "p2p", send, data_deps=(1,),
                   attrs={"comm_dst" if send == 5 else "comm_src": peer, "comm_size": 4096,
                          "comm_tag": 3}),
        ChakraNode(3, "tail", 4, data_deps=(2,), duration_micros=30,
                   attrs={"duration_s": 3.0e-5}),
    )


def chakra_et(rank: int) -> bytes:
    return encode_et(ChakraTrace(f"t.{rank}.et", rank, "1.0.1", {"schema": "1.0.1"},
                                 _chakra_nodes(rank)))


def chakra_json(rank: int) -> str:
    nodes = []
    for n in _chakra_nodes(rank):
        raw: dict[str, Any] = {"Id": n.id, "Name": n.name, "NodeType": n.type,
                               "data_deps": list(n.data_deps), "runtime": n.duration_micros}
        raw["attr"] = [{"name": k, "values": v} if isinstance(v, list) else
                       {"name": k, "int64Val": v} for k, v in n.attrs.items()]
        nodes.append(raw)
    return json.dumps({"workload_graph": nodes}, indent=1)


_HOSTILE_ATTRS: tuple[tuple[str, Any], ...] = (
    ("duration_s", float("inf")), ("duration_s", float("nan")), ("duration_s", -1.0),
    ("pg_ranks", [0, 7]), ("pg_ranks", [0, 0]), ("comm_size", -5), ("comm_type", 42),
    ("comm_tag", 2**70), ("comm_dst", 9), ("num_ops", 2**64 + 1), ("is_cpu_op", 5),
    ("stream", -1), ("tid", 2**65), ("pg_ranks", [2**40]),
)


def _hostile_et(rng: random.Random) -> bytes:
    """Rank 0's ET with one node changed: a hostile attribute, id, type or dependency,
    or an attribute of another wire type."""
    nodes = list(_chakra_nodes(0))
    i = rng.randrange(len(nodes))
    node = nodes[i]
    kind = rng.choice(("attr", "attr", "id", "type", "deps", "wire"))
    if kind == "attr":
        name, value = rng.choice(_HOSTILE_ATTRS)
        nodes[i] = ChakraNode(node.id, node.name, node.type, node.ctrl_deps, node.data_deps,
                              node.duration_micros, 0, {**node.attrs, name: value})
    elif kind == "id":
        nodes[i] = ChakraNode(rng.choice((2**64 - 1, 0, 3)), node.name, node.type,
                              data_deps=node.data_deps, attrs=node.attrs)
    elif kind == "type":
        nodes[i] = ChakraNode(node.id, node.name, rng.choice((0, 1, 8, 2**40)),
                              data_deps=node.data_deps, attrs=node.attrs)
    elif kind == "deps":
        nodes[i] = ChakraNode(node.id, node.name, node.type,
                              data_deps=(rng.choice((node.id, 99, 2**63)),),
                              attrs=node.attrs)
    try:
        data = encode_et(ChakraTrace("t.0.et", 0, "1.0.1", {}, tuple(nodes)))
    except (ValueError, OverflowError):  # (a value the writer cannot encode: make it raw)
        data = chakra_et(0)
    if kind == "wire":
        body = (encode_varint_field(1, 9) + encode_bytes(2, "w") + encode_varint_field(3, 4)
                + encode_bytes(10, encode_bytes(1, "duration_s")
                               + rng.choice((encode_varint_field(3, 5),
                                             encode_bytes(4, encode_varint_field(1, 1)),
                                             encode_bytes(30, encode_varint_field(1, 1)),
                                             encode_varint_field(29, 1)))))
        data += encode_delimited(body)
    return data


def _chakra_case(rng: random.Random, family: str) -> ReadCase:
    binary = family == "chakra_et"
    name = "t.0.et" if binary else "t.0.json"
    other = ("t.1.et", chakra_et(1)) if binary else ("t.1.json", chakra_json(1).encode())
    text = chakra_json(0)
    choices = [*_TEXT_MUTATIONS, *(("value",) * 3)]
    mutation = rng.choice(choices)
    if mutation == "value":
        data = _hostile_et(rng) if binary else _json_value(rng, text)
    elif binary:
        data = _TEXT_MUTATIONS[mutation](rng, chakra_et(0))
    else:
        data = _TEXT_MUTATIONS[mutation](rng, text.encode())
    return ReadCase(Case(family, mutation, name, data, CHAKRA_ARGV), (other,))


# --------------------------------------------------------------------------- runs tables

RUNS_BASE = {"cluster": {"preset": "switch", "gpus": 4, "link_bandwidth": "100 GB/s",
                         "link_latency": "1 us"},
             "model": {"name": "gpt", "layers": 2, "hidden": 256, "heads": 4, "seq_len": 128,
                       "vocab": 1000},
             "parallelism": {"tp": 1, "pp": 1, "dp": 4},
             "training": {"micro_batch": 1, "global_batch": 4, "recompute": "none"},
             "compute": {"gpu": "a100-80gb"}}
RUNS_MAP = json.dumps({
    "scenario": RUNS_BASE,
    "measured": {"column": "time (ms)", "unit": "ms"},
    "group_by": "size",
    "columns": {"gpus": [{"key": "cluster.gpus", "at_least": 1, "multiply": 1,
                          "round": "up"}],
                "tp": "parallelism.tp", "dp": "parallelism.dp"},
    "set": {"training.recompute": "none"},
}, indent=1)
RUNS_TABLE = "size,gpus,tp,dp,time (ms)\nsmall,4,1,4,1.5\nsmall,4,2,2,1.7\nbig,4,4,1,2.1\n"


def _runs_case(rng: random.Random, family: str) -> ReadCase:
    mutated_map = family == "runs_map"
    name, text = ("map.yaml", RUNS_MAP) if mutated_map else ("runs.csv", RUNS_TABLE)
    other = ("runs.csv", RUNS_TABLE.encode()) if mutated_map else ("map.yaml",
                                                                    RUNS_MAP.encode())
    mutation = rng.choice([*_TEXT_MUTATIONS, *(("value",) * (4 if mutated_map else 0)),
                           *(("cell",) * (0 if mutated_map else 3))])
    if mutation == "value":
        data = _yaml_value(rng, RUNS_MAP)
    elif mutation == "cell":  # one cell replaced by a hostile value (quoted where needed)
        lines = RUNS_TABLE.splitlines()
        row = rng.randrange(len(lines))
        cells = lines[row].split(",")
        value = str(rng.choice((*HOSTILE_VALUES, "9" * 5000, "x" * 140_000, "1e308")))
        cells[rng.randrange(len(cells))] = '"' + value.replace('"', '""') + '"'
        lines[row] = ",".join(cells)
        data = ("\n".join(lines) + "\n").encode()
    else:
        data = _TEXT_MUTATIONS[mutation](rng, text.encode())
    return ReadCase(Case(family, mutation, name, data, RUNS_ARGV), (other,))


# --------------------------------------------------------------------------- sections

_SMALL_MODEL = "{layers: 2, hidden: 256, heads: 4, seq_len: 128, vocab: 1000}"
SECTION_BASES = {
    "moe": """\
name: moe
cluster: {preset: dgx-a100, nodes: 1}
model: {layers: 2, hidden: 256, heads: 4, seq_len: 128, vocab: 1000, ffn_hidden: 512,
        experts: 8, top_k: 2,
        moe: {routing: {histogram: [5, 1, 1, 1, 2, 2, 3, 1]}, capacity_factor: 1.25,
              placement: balanced}}
parallelism: {tp: 1, pp: 1, dp: 8, ep: 4}
training: {micro_batch: 1, global_batch: 8, recompute: none, precision: bf16}
compute: {gpu: a100-80gb}
stragglers: {n0.gpu3: 1.2, jitter: {sigma: 0.05}}
faults:
  - {target: nic, name: n0.nic1, kind: degraded, bandwidth_factor: 0.5}
""",
    "osdp": f"""\
name: osdp
cluster: {{preset: dgx-a100, nodes: 1}}
model: {_SMALL_MODEL}
parallelism:
  tp: 1
  dp: 8
  operator_sharding: {{default: replicated, sharded: [mlp_fc1, mlp_fc2], split: {{mlp_fc1: 4}}}}
training: {{micro_batch: 1, global_batch: 8, recompute: full, precision: bf16}}
compute: {{gpu: a100-80gb}}
""",
    "offload": f"""\
name: offload
cluster: {{preset: dgx-a100, nodes: 1}}
model: {_SMALL_MODEL}
parallelism:
  tp: 1
  dp: 8
  zero: 2
  offload: {{optimizer: cpu, host: {{memory: 1 TB, memory_bandwidth: 200 GB/s, drives: 0}}}}
training: {{micro_batch: 1, global_batch: 8, recompute: full, precision: bf16}}
compute: {{gpu: a100-80gb}}
""",
    "jobs": f"""\
name: jobs
cluster: {{preset: dgx-a100, nodes: 2, fabric: {{kind: fat-tree, oversubscription: 2}}}}
compute: {{gpu: a100-80gb}}
faults:
  - {{target: node, name: n1, kind: down}}
jobs:
  - {{name: a, model: {_SMALL_MODEL}, parallelism: {{tp: 2, dp: 2}},
     training: {{micro_batch: 1, global_batch: 4}}, placement: packed}}
  - {{name: b, model: {_SMALL_MODEL}, parallelism: {{dp: 4}},
     training: {{micro_batch: 1, global_batch: 4}}, placement: [n0.gpu4, n0.gpu5, n0.gpu6,
                                                                n0.gpu7]}}
""",
}


def _sections_case(rng: random.Random) -> ReadCase:
    base = rng.choice(sorted(SECTION_BASES))
    text = SECTION_BASES[base]
    mutation = rng.choice([*_TEXT_MUTATIONS, *(("value",) * 6)])
    data = (_yaml_value(rng, text) if mutation == "value"
            else _TEXT_MUTATIONS[mutation](rng, text.encode()))
    return ReadCase(Case("sections", f"{base}:{mutation}", "s.yaml", data, ("run", "{file}")))


# --------------------------------------------------------------------------- cases


def _import_case(rng: random.Random, family: str) -> ReadCase:
    """A topology dump with one text mutation (numbers, tokens, lines, nesting...)."""
    name, data, argv = IMPORT_BASES[family]
    mutation = rng.choice(sorted(_TEXT_MUTATIONS))
    return ReadCase(Case(family, mutation, name, _TEXT_MUTATIONS[mutation](rng, data), argv))


def read_base_cases() -> list[ReadCase]:
    """Every family's input unmutated: each must run (exit 0)."""
    cases = [
        ReadCase(Case("chakra_et", "none", "t.0.et", chakra_et(0), CHAKRA_ARGV),
                 (("t.1.et", chakra_et(1)),)),
        ReadCase(Case("chakra_json", "none", "t.0.json", chakra_json(0).encode(),
                      CHAKRA_ARGV), (("t.1.json", chakra_json(1).encode()),)),
        ReadCase(Case("runs_table", "none", "runs.csv", RUNS_TABLE.encode(), RUNS_ARGV),
                 (("map.yaml", RUNS_MAP.encode()),)),
    ]
    cases += [ReadCase(Case("sections", f"{name}:none", "s.yaml", text.encode(),
                            ("run", "{file}"))) for name, text in SECTION_BASES.items()]
    cases += [ReadCase(Case(family, "none", name, data, argv))
              for family, (name, data, argv) in IMPORT_BASES.items()]
    return cases


def generate_read(count: int, seed: int = 0) -> list[ReadCase]:
    """``count`` cases, the families in turn, mutations drawn from ``seed``."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        family = READ_FAMILIES[i % len(READ_FAMILIES)]
        if family.startswith("chakra"):
            cases.append(_chakra_case(rng, family))
        elif family.startswith("runs"):
            cases.append(_runs_case(rng, family))
        elif family in IMPORT_BASES:
            cases.append(_import_case(rng, family))
        else:
            cases.append(_sections_case(rng))
    return cases


def run_read_case(read: ReadCase, folder: Path, cap_s: int) -> tuple[str, str]:
    """Write the files beside, run the case (:func:`tests.fuzz.cases.run_case`); an error
    naming a file beside it is clean too."""
    for name, data in read.beside:
        (folder / name).write_bytes(data)
    case = read.case
    argv = tuple(a.replace("{dir}", str(folder)) for a in case.argv)
    outcome, message = run_case(Case(case.family, case.mutation, case.file_name, case.data,
                                     argv), folder, cap_s)
    if outcome == "unnamed" and any(name in message for name, _ in read.beside):
        return "clean", message
    return outcome, message


def run_read_batch(cases: list[ReadCase], *, cap_s: int = 10) -> dict[str, Any]:
    """Run every case; counts by outcome and family, and the first few bad ones."""
    counts: Counter[str] = Counter()
    by_family: dict[str, Counter[str]] = {f: Counter() for f in READ_FAMILIES}
    bad: list[dict[str, str]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="distsim-fuzz-read-") as tmp:
        for i, read in enumerate(cases):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            outcome, message = run_read_case(read, folder, cap_s)
            counts[outcome] += 1
            by_family[read.case.family][outcome] += 1
            if outcome not in ("clean", "accepted") and len(bad) < 20:
                bad.append({"case": str(i), "family": read.case.family,
                            "mutation": read.case.mutation, "outcome": outcome,
                            "message": message})
    return {"cases": len(cases), "counts": dict(counts),
            "by_family": {f: dict(c) for f, c in by_family.items()}, "bad": bad,
            "wall_s": round(time.perf_counter() - started, 2)}


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.fuzz.read_cases --count N --seed S``: one batch, counts as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cap-s", type=int, default=10, help="time cap per case")
    parser.add_argument("--mem-gib", type=float, default=4.0,
                        help="address-space cap of this process (RLIMIT_AS)")
    args = parser.parse_args(argv)
    cap = int(args.mem_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    report = run_read_batch(generate_read(args.count, args.seed), cap_s=args.cap_s)
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
