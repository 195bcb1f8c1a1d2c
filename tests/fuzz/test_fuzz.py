"""The fuzz suite in CI: ~200 generated malformed inputs of every family (scenario and
cluster YAML, issue 15's faults/stragglers/goodput keys, ``--set``, nccl-tests logs, Kineto
traces, cost tables; see :mod:`tests.fuzz.cases`), run in one subprocess under a 4 GiB
address-space cap with a 10 s cap per case.  Every case must end in a clean error naming
its source, or run (the mutation was valid input): no traceback, no timeout, no
MemoryError.  About 10 s on two cores; ``benchmarks/fuzz.py`` runs thousands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fuzz.cases import FAMILIES, base_cases, generate, run_case

ROOT = Path(__file__).parents[2]


def test_every_base_input_runs(tmp_path):
    # A fuzz of inputs that fail anyway would prove nothing.
    for i, case in enumerate(base_cases()):
        folder = tmp_path / str(i)
        folder.mkdir()
        assert run_case(case, folder, 60) == ("accepted", ""), case.family


def test_generation_is_seeded_and_covers_every_family():
    first, again = generate(60, seed=3), generate(60, seed=3)
    assert first == again and first != generate(60, seed=4)
    assert {case.family for case in first} == set(FAMILIES)


def test_two_hundred_malformed_inputs_end_in_clean_errors():
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.cases", "--count", "196", "--seed", "13",
         "--cap-s", "10", "--mem-gib", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    counts = report["counts"]
    assert report["cases"] == 196
    assert set(counts) <= {"clean", "accepted"}, json.dumps(report["bad"], indent=1)
    assert counts["clean"] >= 120  # the mutations are hostile: most must be refused
