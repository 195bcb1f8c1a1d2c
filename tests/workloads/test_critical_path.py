"""The critical path follows dependencies, not the stream that waited: a collective that
started before its wait (a gradient bucket's all-reduce behind the backward of the layers
below it) is on the path whole, from its start, and the work that ran beside it is not."""

from __future__ import annotations

import simpy
from distsim_gpu.workloads.iteration.timeline import Meeting, Meetings, RankGroup, critical_path


def _at(env: simpy.Environment, time_s: float) -> None:
    env.run(until=time_s)


def test_a_collective_started_before_its_wait_is_on_the_path_whole():
    env = simpy.Environment()
    group = RankGroup(0, 0, ("n0.gpu0",), 1.0)
    group.path.append((0.0, 1.0, "compute", "L2 bwd", None))
    bucket = Meeting(env)  # launched as L2's backward ends, by this group alone
    bucket.start_s, bucket.end_s, bucket.label = 1.0, 5.0, "grads to L2"
    bucket.cause = (group, len(group.path))
    group.path.append((1.0, 2.0, "compute", "L1 bwd", None))
    group.path.append((2.0, 3.0, "compute", "L0 bwd", None))
    _at(env, 5.0)  # the wait began at 3, as L0's backward ended
    Meetings(env).record_wait(group, bucket, 3.0, "dp comm", bucket.label)
    group.end_s = 5.0
    path = critical_path([group], 5.0)
    # L1's and L0's backward had 2 s of slack: the bucket's 4 s is what set the end.
    assert [(e.start_s, e.end_s, e.kind, e.label) for e in path] == [
        (0.0, 1.0, "compute", "L2 bwd"), (1.0, 5.0, "dp comm", "grads to L2")]
    assert sum(e.duration_s for e in path) == 5.0


def test_a_collective_started_after_its_wait_began_is_followed_to_its_last_arrival():
    """A peer came late: the wait runs from the collective's start, and the path goes on
    through what the late peer did (its own segment), not the waiting group's."""
    env = simpy.Environment()
    early, late = RankGroup(0, 0, ("n0.gpu0",), 1.0), RankGroup(0, 1, ("n1.gpu0",), 1.0)
    early.path.append((0.0, 1.0, "compute", "fast", None))
    late.path.append((0.0, 2.0, "compute", "slow", None))
    meeting = Meeting(env)
    meeting.start_s, meeting.end_s, meeting.label = 2.0, 3.0, "all-reduce"
    meeting.cause = (late, len(late.path))
    _at(env, 3.0)
    Meetings(env).record_wait(early, meeting, 1.0, "dp comm", meeting.label)
    early.end_s, late.end_s = 3.0, 2.0
    path = critical_path([early, late], 3.0)
    assert [(e.start_s, e.end_s, e.label, e.group) for e in path] == [
        (0.0, 2.0, "slow", late.name), (2.0, 3.0, "all-reduce", early.name)]
