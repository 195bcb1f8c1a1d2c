"""The progress line: when it draws, what it says, and that it never changes a run."""

from __future__ import annotations

import io

import pytest
from distsim_gpu.simcore import progress
from distsim_gpu.simcore.progress import DELAY_S, REFRESH_S, TICK_EVENTS, Reporter, reporting
from distsim_gpu.simcore.simulation import Simulation


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _reporter() -> tuple[Reporter, Terminal, Clock]:
    out, clock = Terminal(), Clock()
    return Reporter("run", out, clock=clock), out, clock


def test_silent_for_a_short_run_then_at_most_one_draw_per_refresh():
    reporter, out, clock = _reporter()
    reporter.phase("simulating")
    for _ in range(3):
        reporter.tick(0.5)
    clock.now += DELAY_S * 0.9
    reporter.refresh()
    assert out.getvalue() == ""  # under DELAY_S: nothing drawn
    clock.now += DELAY_S * 0.2
    reporter.tick(0.7)
    reporter.refresh()
    drawn = out.getvalue()
    assert drawn.startswith("\rdistsim run: simulating · simulated 700 ms")
    assert drawn.endswith("\x1b[K")
    assert f"{4 * TICK_EVENTS / 1000:.3g}k events" in drawn
    clock.now += REFRESH_S / 2
    reporter.refresh()
    assert out.getvalue() == drawn  # within REFRESH_S: not redrawn
    clock.now += REFRESH_S
    reporter.refresh()
    assert out.getvalue().count("\r") == 2
    reporter.close()
    assert out.getvalue().endswith("\r\x1b[K")  # the line is erased at the end


def test_before_any_event_the_line_shows_the_phase_and_time():
    reporter, _out, clock = _reporter()
    reporter.phase("building the cluster")
    clock.now += 75.0
    assert reporter.line(clock.now) == "distsim run: building the cluster · 1:15"


def test_the_drawing_thread_draws_while_the_work_does_not_tick(monkeypatch):
    import time
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "REFRESH_S", 0.01)
    out = Terminal()
    with reporting("nccl-tests", stream=out) as reporter:
        reporter.phase("planning")
        deadline = time.monotonic() + 5
        while "planning" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)  # (no tick: a long computation outside the event loop)
    assert "distsim nccl-tests: planning ·" in out.getvalue()
    assert out.getvalue().endswith("\r\x1b[K")


def test_estimate_of_what_is_left_from_stages():
    reporter, _out, clock = _reporter()
    clock.now += 30.0
    reporter.stage(3, 12, "sizes")  # 3 of 12 in 30 s: 90 s left
    assert reporter.left_s(clock.now) == pytest.approx(90.0)
    assert "3/12 sizes" in reporter.line(clock.now) and "~1:30 left" in reporter.line(clock.now)


def test_estimate_of_what_is_left_from_the_expected_end():
    reporter, _out, clock = _reporter()
    calls = []
    reporter.expect(lambda: calls.append(1) or 4.0)
    clock.now += 5.0  # (setup: not counted in the rate)
    reporter.tick(0.5)
    assert reporter.left_s(clock.now) is None
    clock.now += 10.0
    reporter.tick(1.5)  # 1 simulated s in 10 host s; 2.5 more to go: 25 s
    assert reporter.left_s(clock.now) == pytest.approx(25.0)
    assert "simulated 1.5 s of ~4 s" in reporter.line(clock.now)
    reporter.tick(1.6)
    assert calls == [1]  # the estimate is asked for once


def test_off_in_a_pipe_or_when_quiet():
    with reporting("run", stream=io.StringIO()) as reporter:
        assert reporter is None and progress.current() is None
    with reporting("run", enabled=False, stream=Terminal()) as reporter:
        assert reporter is None


def _ping_pong(sim: Simulation, rounds: int) -> float:
    def proc():
        for _ in range(rounds):
            yield sim.env.timeout(1e-6)

    sim.env.process(proc())
    return sim.run()


def test_simulations_inside_the_block_tick_it_and_run_the_same():
    out = Terminal()
    with reporting("run", stream=out) as reporter:
        assert progress.current() is reporter
        ticked = _ping_pong(Simulation(0), 3 * TICK_EVENTS)
        assert reporter.events == (3 * TICK_EVENTS + 1) // TICK_EVENTS * TICK_EVENTS
        assert reporter.sim_now_s > 0
    assert progress.current() is None
    assert ticked == _ping_pong(Simulation(0), 3 * TICK_EVENTS)


def test_cli_prints_no_progress_when_stderr_is_not_a_terminal(capsys):
    from distsim_gpu.scenarios.cli.main import main
    assert main(["nccl-tests", "--cluster", "dgx-a100", "-e", "64K"]) == 0
    assert "\r" not in capsys.readouterr().err
