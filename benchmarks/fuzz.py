"""The long fuzz run: thousands of malformed inputs of every family through ``distsim``.

The cases and the runner are the CI suite's (``tests/fuzz/cases.py``); this runs more of
them, in batches (one subprocess each, under a memory cap, so a runaway case cannot take
the machine), and prints the counts by outcome and by family.  Run from the repository
root::

    .venv/bin/python benchmarks/fuzz.py --count 1200 --seed 0
    .venv/bin/python benchmarks/fuzz.py --count 0 --read-count 1000   # the newer readers

``--read-count`` adds cases of the newer readers (Chakra ETs binary and JSON, ``validate
runs`` tables and maps, the scenario sections beside the model: ``tests/fuzz/read_cases.py``).

Outcomes: ``clean`` (exit 2, a ``distsim: error:`` line naming the file or ``--set``),
``accepted`` (the mutation was valid input), ``unnamed`` (a clean error without its
source), ``traceback``, ``timeout`` (past ``--cap-s``), ``memory`` (past ``--mem-gib``).
Exit status 1 when any case is neither clean nor accepted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _batch(count: int, seed: int, cap_s: int, mem_gib: float) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.cases", "--count", str(count), "--seed", str(seed),
         "--cap-s", str(cap_s), "--mem-gib", str(mem_gib)],
        cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # the batch itself died (the memory cap, a hard crash)
        return {"cases": count, "counts": {"batch-died": count}, "by_family": {},
                "bad": [{"message": done.stderr[-500:]}], "wall_s": 0.0}
    return json.loads(done.stdout)


def _read_batch(count: int, seed: int, cap_s: int, mem_gib: float) -> dict:
    """One batch of the newer readers' cases (tests/fuzz/read_cases.py), as _batch."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.read_cases", "--count", str(count), "--seed",
         str(seed), "--cap-s", str(cap_s), "--mem-gib", str(mem_gib)],
        cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"cases": count, "counts": {"batch-died": count}, "by_family": {},
                "bad": [{"message": done.stderr[-500:]}], "wall_s": 0.0}
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1200, help="cases in all")
    parser.add_argument("--batch", type=int, default=300, help="cases per subprocess")
    parser.add_argument("--seed", type=int, default=0, help="first batch's seed")
    parser.add_argument("--cap-s", type=int, default=20, help="time cap per case")
    parser.add_argument("--mem-gib", type=float, default=4.0, help="memory cap per batch")
    parser.add_argument("--read-count", type=int, default=0,
                        help="cases of the newer readers besides (Chakra, runs tables, "
                        "scenario sections)")
    args = parser.parse_args()
    counts: Counter[str] = Counter()
    families: dict[str, Counter[str]] = {}
    bad: list[dict] = []
    wall_s = 0.0
    batches = [(_batch, start, args.count) for start in range(0, args.count, args.batch)]
    batches += [(_read_batch, start, args.read_count)
                for start in range(0, args.read_count, args.batch)]
    for i, (run, start, total) in enumerate(batches):
        report = run(min(args.batch, total - start), args.seed + i, args.cap_s, args.mem_gib)
        counts.update(report["counts"])
        for family, found in report["by_family"].items():
            families.setdefault(family, Counter()).update(found)
        bad.extend(report["bad"])
        wall_s += report["wall_s"]
        print(f"batch {i} (seed {args.seed + i}): {report['counts']}", file=sys.stderr)
    print(f"{sum(counts.values())} cases in {wall_s:.0f} s: " +
          ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    for family, found in sorted(families.items()):
        print(f"  {family:<11} " + ", ".join(f"{k} {v}" for k, v in found.most_common()))
    for case in bad[:20]:
        print("  bad:", json.dumps(case)[:300])
    return 0 if set(counts) <= {"clean", "accepted"} else 1


if __name__ == "__main__":
    sys.exit(main())
