"""Tracer: spans and counters become a Chrome trace (µs times, named tracks)."""

from __future__ import annotations

import json

import pytest
from distsim_gpu.simcore.trace import Counter, Paced, Span, Tracer


def events_of(trace, phase):
    return [e for e in trace["traceEvents"] if e["ph"] == phase]


def test_span_becomes_complete_event_in_microseconds():
    tracer = Tracer()
    tracer.span("n0.gpu0", "compute", "fwd.layer3", 1.5e-3, 4e-3, flops=1e12)
    trace = tracer.to_chrome_trace()
    (event,) = events_of(trace, "X")
    assert event["name"] == "fwd.layer3"
    assert event["ts"] == pytest.approx(1500.0, rel=1e-12)
    assert event["dur"] == pytest.approx(2500.0, rel=1e-12)
    assert event["args"] == {"flops": 1e12}


def test_tracks_are_named_by_metadata_events():
    tracer = Tracer()
    tracer.span("n0.gpu0", "compute", "a", 0.0, 1.0)
    tracer.span("n0.gpu0", "comm", "b", 0.0, 1.0)
    tracer.span("n0.gpu1", "compute", "c", 0.0, 1.0)
    trace = tracer.to_chrome_trace()
    meta = events_of(trace, "M")
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta
               if e["name"] == "thread_name"}
    assert sorted(processes.values()) == ["n0.gpu0", "n0.gpu1"]
    assert sorted(threads.values()) == ["comm", "compute", "compute"]
    for event in events_of(trace, "X"):
        # Each span sits on the track named after its process and thread.
        assert (event["pid"], event["tid"]) in threads
    by_name = {e["name"]: e for e in events_of(trace, "X")}
    assert processes[by_name["a"]["pid"]] == "n0.gpu0"
    assert threads[(by_name["b"]["pid"], by_name["b"]["tid"])] == "comm"
    assert processes[by_name["c"]["pid"]] == "n0.gpu1"
    assert by_name["a"]["pid"] == by_name["b"]["pid"] != by_name["c"]["pid"]
    assert by_name["a"]["tid"] != by_name["b"]["tid"]


def test_each_track_is_named_once():
    tracer = Tracer()
    for i in range(5):
        tracer.span("p", "t", f"s{i}", i, i + 1)
    meta = events_of(tracer.to_chrome_trace(), "M")
    assert sum(e["name"] == "process_name" for e in meta) == 1
    assert sum(e["name"] == "thread_name" for e in meta) == 1


def test_counter_becomes_counter_event():
    tracer = Tracer()
    tracer.counter("links", "n0->n1 util", 2e-6, 0.75)
    trace = tracer.to_chrome_trace()
    (event,) = events_of(trace, "C")
    assert event["name"] == "n0->n1 util"
    assert event["ts"] == pytest.approx(2.0, rel=1e-12)
    assert event["args"] == {"n0->n1 util": 0.75}
    names = [e["args"]["name"] for e in events_of(trace, "M") if e["name"] == "process_name"]
    assert names == ["links"]


def test_records_are_frozen_dataclasses():
    tracer = Tracer()
    tracer.span("p", "t", "s", 0.0, 1.0)
    tracer.counter("p", "c", 0.0, 1.0)
    assert tracer.spans == [Span("p", "t", "s", 0.0, 1.0, {})]
    assert tracer.counters == [Counter("p", "c", 0.0, 1.0)]
    with pytest.raises(AttributeError):
        tracer.spans[0].name = "other"


def test_disabled_tracer_records_nothing():
    tracer = Tracer(enabled=False)
    tracer.span("p", "t", "s", 0.0, 1.0)
    tracer.counter("p", "c", 0.0, 1.0)
    assert tracer.spans == [] and tracer.counters == []
    assert tracer.to_chrome_trace()["traceEvents"] == []


def test_json_round_trips_to_the_same_trace():
    tracer = Tracer()
    tracer.span("n0.gpu0", "compute", "fwd", 0.0, 1e-3, layer=3)
    tracer.counter("links", "util", 5e-4, 0.5)
    trace = json.loads(tracer.to_json())
    assert trace == tracer.to_chrome_trace()
    assert "traceEvents" in trace


def test_an_expanded_process_is_written_once_per_copy_with_its_peer_following():
    tracer = Tracer()
    tracer.span("group b", "compute", "k", 0.0, 1e-6)
    tracer.span("group a", "pp send", "F mb0", 1e-6, 3e-6, to="group b", kind="send")
    tracer.span("critical path", "critical path", "k", 0.0, 3e-6, to="nobody")
    tracer.counter("links", "x->y", 0.0, 0.5)
    expand = {"group a": ["g0", "g1"], "group b": ["g2", "g3"]}
    trace = tracer.to_chrome_trace(expand=expand)
    names = {e["pid"]: e["args"]["name"] for e in events_of(trace, "M")
             if e["name"] == "process_name"}
    # The copies first, in the order given; the rest as they come.
    assert list(names.values()) == ["g0", "g1", "g2", "g3", "critical path", "links"]
    spans = [(names[e["pid"]], e["name"], e["args"]) for e in events_of(trace, "X")]
    assert spans == [("g2", "k", {}), ("g3", "k", {}),
                     ("g0", "F mb0", {"to": "g2", "kind": "send"}),
                     ("g1", "F mb0", {"to": "g3", "kind": "send"}),
                     ("critical path", "k", {"to": "nobody"})]
    assert len(events_of(trace, "C")) == 1
    # The tracer itself is unchanged: the arguments were copied, not edited.
    assert tracer.spans[1].args == {"to": "group b", "kind": "send"}
    assert tracer.to_chrome_trace(expand={}) == tracer.to_chrome_trace()


def test_a_paced_copy_runs_its_share_of_a_thread_and_waits_the_rest():
    """g1 ran 3/4 of group a's compute span, then waited for g0 on its comm thread; g0 and
    the other threads are written as recorded."""
    tracer = Tracer()
    tracer.span("group a", "compute", "k", 1e-6, 5e-6, layer="mlp")
    tracer.span("group a", "comm", "all_reduce", 5e-6, 6e-6)
    paced = Paced({"g1": 0.75}, {"g1": ("wait for g0", {"waits_for": "g0"})},
                  "compute", "comm")
    trace = tracer.to_chrome_trace(expand={"group a": ["g0", "g1"]}, paced=paced)
    names = {e["pid"]: e["args"]["name"] for e in events_of(trace, "M")
             if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events_of(trace, "M")
               if e["name"] == "thread_name"}
    spans = [(names[e["pid"]], threads[(e["pid"], e["tid"])], e["name"], e["ts"], e["dur"],
              e["args"]) for e in events_of(trace, "X")]
    assert spans == [
        ("g0", "compute", "k", pytest.approx(1.0), pytest.approx(4.0), {"layer": "mlp"}),
        ("g1", "compute", "k", pytest.approx(1.0), pytest.approx(3.0), {"layer": "mlp"}),
        ("g1", "comm", "wait for g0", pytest.approx(4.0), pytest.approx(1.0),
         {"waits_for": "g0"}),
        ("g0", "comm", "all_reduce", pytest.approx(5.0), pytest.approx(1.0), {}),
        ("g1", "comm", "all_reduce", pytest.approx(5.0), pytest.approx(1.0), {})]
