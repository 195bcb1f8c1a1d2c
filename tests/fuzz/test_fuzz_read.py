"""The fuzz suite of the newer readers in CI: ~100 malformed Chakra ETs (binary and JSON),
``validate runs`` tables and maps, and scenarios with jobs, faults, MoE routing,
per-operator sharding, offload and stragglers (:mod:`tests.fuzz.read_cases`), run in one
subprocess under a 4 GiB address-space cap with a 10 s cap per case.  Every case ends in
a clean error naming one of its files, or runs: no traceback, no timeout, no MemoryError.
``benchmarks/fuzz.py --read-count N`` runs thousands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fuzz.read_cases import READ_FAMILIES, generate_read, read_base_cases, run_read_case

ROOT = Path(__file__).parents[2]


def test_every_base_input_runs(tmp_path):
    # A fuzz of inputs that fail anyway would prove nothing.
    for i, read in enumerate(read_base_cases()):
        folder = tmp_path / str(i)
        folder.mkdir()
        assert run_read_case(read, folder, 60) == ("accepted", ""), read.case.mutation


def test_generation_is_seeded_and_covers_every_family():
    first, again = generate_read(40, seed=3), generate_read(40, seed=3)
    assert first == again and first != generate_read(40, seed=4)
    assert {read.case.family for read in first} == set(READ_FAMILIES)


def test_a_hundred_malformed_inputs_end_in_clean_errors():
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.read_cases", "--count", "100", "--seed", "13",
         "--cap-s", "10", "--mem-gib", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["cases"] == 100
    assert set(report["counts"]) <= {"clean", "accepted"}, json.dumps(report["bad"], indent=1)
    assert report["counts"]["clean"] >= 70  # the mutations are hostile: most must be refused
