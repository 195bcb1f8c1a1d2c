"""Progress of a long run on a terminal: simulated time, events, and an estimate of what is left.

A command that may run for minutes (``distsim run`` on 16,384 GPUs, ``distsim nccl-tests``)
opens a :func:`reporting` block around its work.  Inside it, every
:class:`~simcore.simulation.Simulation` hands its environment the block's
:class:`Reporter`, which the environment ticks once every :data:`TICK_EVENTS` events (one
integer test per event; a tick only adds to counters, so the cost is nothing next to
SimPy's own step).  A daemon thread redraws one line on stderr every :data:`REFRESH_S`
once the block has lasted :data:`DELAY_S` (a quick run prints nothing), so the line moves
even while the work is not simulating (building a 16k-GPU cluster, planning its
collectives), naming the phase the caller set (:meth:`Reporter.phase`):

``distsim run: simulating · simulated 1.23 s of ~3.1 s · 2.4M events (310k/s) · 0:08 · ~0:12 left``

What is left comes from what the caller knows: a count of stages (``nccl-tests``' sizes,
:meth:`Reporter.stage`), else an expected simulated end time (:meth:`Reporter.expect`,
e.g. the iteration-time estimate of :mod:`workloads.cost.bounds`) and the simulated-time rate
so far.  With neither, the line has no estimate.  The line is erased when the block ends,
so the command's own output follows on a clean terminal.

Off when stderr is not a terminal (a pipe, a file, a test) or when the caller says so
(``--quiet``): then :func:`reporting` yields ``None`` and simulations run untouched.  The
reporter lives in a context variable, not in the library's signatures: it shows what a
run does and never changes it (results are the same with or without it).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from distsim_gpu.simcore.units import format_duration

__all__ = ["DELAY_S", "REFRESH_S", "TICK_EVENTS", "Reporter", "current", "reporting"]

TICK_EVENTS = 4096  # events between ticks: a power of two, tested with a mask
REFRESH_S = 0.25
DELAY_S = 1.0

_CURRENT: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar(
    "distsim_progress", default=None)


def current() -> Reporter | None:
    """The reporter of the enclosing :func:`reporting` block, if it shows anything."""
    return _CURRENT.get()


@contextlib.contextmanager
def reporting(label: str, *, enabled: bool = True, stream: TextIO | None = None
              ) -> Iterator[Reporter | None]:
    """Show progress for the work inside the block, labelled ``label`` (``"run"``), on
    ``stream`` (default stderr) when ``enabled`` and the stream is a terminal."""
    out = sys.stderr if stream is None else stream
    isatty = getattr(out, "isatty", None)
    if not enabled or not (callable(isatty) and isatty()):
        yield None
        return
    reporter = Reporter(label, out)
    token = _CURRENT.set(reporter)
    stop = threading.Event()
    drawer = threading.Thread(target=_draw_until, args=(reporter, stop), daemon=True,
                              name="distsim-progress")
    drawer.start()
    try:
        yield reporter
    finally:
        stop.set()
        drawer.join()
        _CURRENT.reset(token)
        reporter.close()


def _draw_until(reporter: Reporter, stop: threading.Event) -> None:
    """The drawing thread: refresh the line every REFRESH_S until ``stop``."""
    while not stop.wait(REFRESH_S):
        reporter.refresh()


class Reporter:
    """Counts ticks and draws the progress line (see the module docstring).

    ``clock`` is the host clock in seconds (replaceable in tests)."""

    def __init__(self, label: str, stream: TextIO, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self.events = 0
        self.sim_now_s = 0.0
        self.stages: tuple[int, int] | None = None
        self.stage_what = ""
        self.phase_text = ""
        self._estimate: Callable[[], float | None] | None = None
        self._expected_end_s: float | None = None
        self._first: tuple[float, float] | None = None  # (host, simulated) at the 1st tick
        self._drawn_at = -1.0
        self._shown = False

    def tick(self, sim_now_s: float, events: int = TICK_EVENTS) -> None:
        """``events`` more events processed; the simulation's clock is at ``sim_now_s``."""
        self.events += events
        self.sim_now_s = sim_now_s
        if self._first is None:  # the rate is measured from here: setup time is not a rate
            self._first = (self.clock(), sim_now_s)
        elif self._estimate is not None and self.clock() - self.started >= DELAY_S:
            # Here, in the simulating thread (the estimate reads the same caches), and only
            # for a run long enough to show a line.
            self._expected_end_s, self._estimate = self._estimate(), None

    def stage(self, done: int, total: int, what: str = "") -> None:
        """``done`` of ``total`` stages finished (``what`` names them: ``"sizes"``)."""
        self.stages = (done, total)
        self.stage_what = what

    def phase(self, text: str) -> None:
        """What the work is doing now ("building the cluster", "simulating")."""
        self.phase_text = text

    def refresh(self) -> None:
        """Draw the line if the block has lasted ``DELAY_S`` and the last draw is
        ``REFRESH_S`` old (the drawing thread calls this)."""
        now = self.clock()
        if now - self.started >= DELAY_S and now - self._drawn_at >= REFRESH_S * 0.9:
            self._drawn_at = now
            self._draw(now)

    def expect(self, estimate: Callable[[], float | None]) -> None:
        """The run should end near simulated time ``estimate()`` seconds; called once, at
        a tick after ``DELAY_S``, so a run too short to show progress never pays for it."""
        self._estimate = estimate

    def left_s(self, now: float) -> float | None:
        """Host seconds left, as far as the reporter can tell (``None``: no idea)."""
        elapsed = now - self.started
        if self.stages is not None and self.stages[0] > 0:
            done, total = self.stages
            return elapsed * (total - done) / done
        end = self._expected_end_s
        if end is None or self._first is None:
            return None
        host_s, sim_s = now - self._first[0], self.sim_now_s - self._first[1]
        if host_s <= 0 or sim_s <= 0:
            return None
        return max(0.0, (end - self.sim_now_s) * host_s / sim_s)

    def line(self, now: float) -> str:
        """The progress line at host time ``now``."""
        parts = [f"distsim {self.label}:"]
        if self.phase_text:
            parts.append(f"{self.phase_text} ·")
        if self.stages is not None:
            parts.append(f"{self.stages[0]}/{self.stages[1]} {self.stage_what}".rstrip() + " ·")
        left = self.left_s(now)
        sim = f"simulated {format_duration(self.sim_now_s)}"
        if self._expected_end_s is not None and self.stages is None:
            sim += f" of ~{format_duration(self._expected_end_s)}"
        elapsed = now - self.started
        if self.events:  # (before the first tick there is nothing simulated to show)
            rate = self.events / elapsed if elapsed > 0 else 0.0
            parts.append(f"{sim} · {_count(self.events)} events ({_count(rate)}/s) ·")
        parts.append(_clock(elapsed))
        if left is not None:
            parts.append(f"· ~{_clock(left)} left")
        return " ".join(parts)

    def _draw(self, now: float) -> None:
        try:
            self.stream.write("\r" + self.line(now)[:200] + "\x1b[K")
            self.stream.flush()
            self._shown = True
        except (OSError, ValueError):  # a closed terminal: stop drawing, keep running
            self._drawn_at = float("inf")

    def close(self) -> None:
        """Erase the line, if one was drawn."""
        if self._shown:
            with contextlib.suppress(OSError, ValueError):
                self.stream.write("\r\x1b[K")
                self.stream.flush()


def _count(value: float) -> str:
    for suffix, factor in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.0f}"


def _clock(value_s: float) -> str:
    minutes, seconds = divmod(int(value_s), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
