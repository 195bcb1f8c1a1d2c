"""Numbers quoted in the docs' prose and tables come from the code, so they cannot drift.

Where a whole output is too long for a sample (``test_docs_samples``), a number is checked
on its own.  A document names a command once, in a comment the page does not show:

    <!-- command spread: run scenarios/examples/faults/two-jobs-oversubscribed.yaml
         --set 'jobs[0].placement=spread' -->

and a number quoted from it is followed by a comment naming the command and where the
figure sits in its ``--json`` output (a dotted path; list items by their index, spaces in
a key as underscores):

    809.6 → 1052.3 ms<!-- = spread :: incidents.jobs.jobs.0.shared_iteration_s -->

This test runs each named command once (``distsim ARGS --json -q``) and checks that every
marked number is the figure at that path, in the unit written before the comment (``s``,
``ms``, ``µs``, ``GiB``, ``GB``, ``GB/s``, ``×`` or none; ``%`` is a fraction times 100) —
or the one the comment names (``:: KEY in ms``, for a number whose unit is written further
on) — rounded as the document rounds it.  ``:: KEY / KEY`` is the ratio of two figures (a
share quoted in %).
After an intended change, run it and copy the figures it reports.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from distsim_gpu.scenarios.cli.main import main

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
COMMAND = re.compile(r"<!-- command (?P<name>[\w-]+): (?P<args>.+?) -->", re.DOTALL)
QUOTE = re.compile(r"(?P<number>−?-?\d[\d,]*(?:\.\d+)?)\s?(?P<unit>GiB|GB/s|GB|ms|µs|s|×|%)?"
                   r"<!-- = (?P<name>[\w-]+) :: (?P<key>[\w.]+(?: / [\w.]+)?)"
                   r"(?: in (?P<in>GiB|GB/s|GB|ms|µs|s))? -->")
SCALE = {"s": 1.0, "ms": 1e3, "µs": 1e6, "×": 1.0, "%": 100.0, "GiB": 2.0 ** -30,
         "GB": 1e-9,
         "GB/s": 1e-9, None: 1.0}


def documents() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


@cache
def run_json(args: str) -> Any:
    """``distsim ARGS --json -q``'s JSON object (run once per command; ``{tmp}`` in ARGS
    is a new empty folder, for a command that must write one)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            tempfile.TemporaryDirectory() as folder, _in(REPO_ROOT):
        argv = [part.replace("{tmp}", folder) for part in shlex.split(args)]
        status = main([*argv, "--json", "-q"])
    assert status == 0, f"distsim {args} failed: {err.getvalue()}"
    return json.loads(out.getvalue())


@contextlib.contextmanager
def _in(directory: Path) -> Iterator[None]:
    """Run from ``directory`` (the docs' commands name repository paths)."""
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def figure(data: Any, key: str) -> float:
    """The number at dotted ``key`` of ``data``, or the ratio of two (``KEY / KEY``)."""
    if " / " in key:
        numerator, denominator = key.split(" / ")
        return figure(data, numerator) / figure(data, denominator)
    value = data
    for part in key.split("."):
        if isinstance(value, list):
            value = value[int(part)]
        else:  # (a key with spaces, "tp comm", is written with underscores: tp_comm)
            value = value[part] if part in value else value[part.replace("_", " ")]
    return float(value)


def quotes() -> list[tuple[str, str, str, str, str | None]]:
    """(document, command args, key, number as written, unit) of every marked number."""
    found = []
    for path in documents():
        text = path.read_text(encoding="utf-8")
        commands = {m["name"]: " ".join(m["args"].split()) for m in COMMAND.finditer(text)}
        for m in QUOTE.finditer(text):
            assert m["name"] in commands, f"{path.name}: no command named {m['name']!r}"
            found.append((path.name, commands[m["name"]], m["key"], m["number"],
                          m["in"] or m["unit"]))
    return found


def test_the_docs_mark_some_numbers() -> None:
    assert len(quotes()) >= 10


def test_every_mark_is_read() -> None:
    """A mark the pattern does not read (a typo, a unit it does not know) would check
    nothing: each ``<!-- =`` and ``<!-- command`` must be one the test reads."""
    for path in documents():
        text = path.read_text(encoding="utf-8")
        assert text.count("<!-- = ") == len(QUOTE.findall(text)), path.name
        assert text.count("<!-- command ") == len(COMMAND.findall(text)), path.name


def quotes_by_command() -> dict[str, list[tuple[str, str, str, str | None]]]:
    """Every marked number by the command it is read from: (document, key, number as
    written, unit), whichever page quotes it."""
    grouped: dict[str, list[tuple[str, str, str, str | None]]] = {}
    for document, args, key, number, unit in quotes():
        grouped.setdefault(args, []).append((document, key, number, unit))
    return grouped


def plain(number: str) -> str:
    """A number as the page writes it, without thousands separators, with ASCII minus."""
    return number.replace(",", "").replace("−", "-")


def as_written(value: float, key: str, number: str, unit: str | None) -> str:
    """``value`` in ``unit``, rounded as the page writes ``number``."""
    written = plain(number)
    decimals = len(written.split(".")[1]) if "." in written else 0
    # A figure the code gives in per cent already (``*_pct``, or under one) is quoted as it is.
    scale = 1.0 if unit == "%" and "_pct" in key else SCALE[unit]
    return f"{value * scale:.{decimals}f}"


@pytest.mark.parametrize("args", sorted(quotes_by_command()), ids=lambda args: args[:60])
def test_the_numbers_quoted_from_a_command_are_what_it_gives(args: str) -> None:
    """One test a command, so that it runs once however the suite is spread over
    pytest-xdist's workers; every number any page quotes from it is checked."""
    if "../shared/data" in args and not SHARED_DATA.is_dir():
        pytest.skip("the measurements in ../shared/data are not on this machine")
    data = run_json(args)
    wrong = []
    for document, key, number, unit in quotes_by_command()[args]:
        got = as_written(figure(data, key), key, number, unit)
        if got != plain(number):
            wrong.append(f"{document}: {key} is {got}, the page says {number}")
    assert not wrong, f"`distsim {args}`:\n  " + "\n  ".join(wrong)
