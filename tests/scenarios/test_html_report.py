"""report.html and what it draws: timelines (rows per GPU or per schedule, joined
segments), the link map (against the flow network's own statistics), the page (titles,
iteration time, inlined JavaScript, no network), and `--out` with and without Plotly."""

from __future__ import annotations

import math
import re
import sys

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.report import OUTPUT_FILES, html_report, write_output_dir
from distsim_gpu.scenarios.report.linkmap import bin_links, link_class
from distsim_gpu.scenarios.report.timelines import (
    Timeline,
    bin_segments,
    fine_segments,
    merge_segments,
    schedule_rows,
)
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.simcore.units import format_duration
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Fused

TITLES = ("Iteration timeline per GPU", "Time per GPU", "Memory per GPU", "Link utilisation",
          "Critical path", "Critical path by kind")


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory, tiny, write_scenario):
    path = write_scenario(tmp_path_factory.mktemp("html") / "tiny.yaml", tiny())
    return run_scenario(load_scenario(path))


def test_joined_segments_keep_kinds_apart_and_name_their_ends():
    segments = [(0.0, 1.0, "compute", "a"), (1.05, 2.0, "compute", "b"),
                (2.0, 2.5, "dp comm", "c"), (2.5, 3.0, "compute", "d"),
                (3.5, 4.0, "compute", "e")]
    merged = merge_segments(segments, resolution_s=0.1)
    # a+b join (gap 0.05); d joins them too (gap 0.5 > 0.1: no); e stands alone.
    assert merged == [(0.0, 2.0, "compute", "a … b (2 ops)"), (2.0, 2.5, "dp comm", "c"),
                      (2.5, 3.0, "compute", "d"), (3.5, 4.0, "compute", "e")]
    assert merge_segments(segments, resolution_s=1.0)[0] == (
        0.0, 4.0, "compute", "a … e (4 ops)")
    assert merge_segments(segments, resolution_s=0.0) == segments


def test_a_bin_shows_the_kind_that_filled_most_of_it():
    # Ten bins of 1 s.  Bin 2 holds 0.9 s of a and 0.1 s of b: a.  Bin 4 holds 0.4 s of
    # b: less than half, nothing.  Kinds never overlap in the result.
    segments = [(0.0, 2.5, "a", "a1"), (2.5, 2.6, "b", "b1"), (2.6, 4.0, "a", "a2"),
                (4.6, 10.0, "b", "b2")]
    assert bin_segments(segments, 10.0, 10) == [(0.0, 4.0, "a", "a1 … a2 (2 ops)"),
                                                (5.0, 10.0, "b", "b2")]
    # Fine enough bins draw every segment at its bins' edges.
    fine = bin_segments(segments, 10.0, 100)
    assert [(round(s, 9), round(e, 9), k) for s, e, k, _ in fine] == [
        (0.0, 2.5, "a"), (2.5, 2.6, "b"), (2.6, 4.0, "a"), (4.6, 10.0, "b")]
    # Alternating faster than a bin: the kind that took the time, one run.
    blink = [(i * 0.1, i * 0.1 + 0.1, "compute" if i % 3 else "tp comm", str(i))
             for i in range(100)]
    assert [k for _, _, k, _ in bin_segments(blink, 10.0, 10)] == ["compute"]


class _Group:
    def __init__(self, stage, gpus):
        self.stage, self.gpus = stage, gpus


def test_rows_are_gpus_when_few_and_groups_of_gpus_when_many():
    a = Timeline("stage 0", 0, ("g0", "g1", "g4", "g5"), ((0.0, 1.0, "compute", "x"),), ())
    b = Timeline("stage 1", 1, ("g2", "g3", "g6", "g7"), ((0.0, 1.0, "compute", "y"),), ())
    order = [f"g{i}" for i in range(8)]
    groups = [_Group(0, ("g0", "g1", "g4", "g5")), _Group(1, ("g2", "g3")),
              _Group(1, ("g6", "g7"))]
    rows = schedule_rows([a, b], groups, order, max_rows=8)
    assert [r.label for r in rows] == order
    assert [r.timeline.name for r in rows] == ["stage 0"] * 2 + ["stage 1"] * 2 + [
        "stage 0"] * 2 + ["stage 1"] * 2
    rows = schedule_rows([a, b], groups, order, max_rows=4)
    assert [(r.label, r.gpus, r.timeline.name) for r in rows] == [
        ("group 1: stage 0, 4 GPUs", ("g0", "g1", "g4", "g5"), "stage 0"),
        ("group 2: stage 1, 2 GPUs", ("g2", "g3"), "stage 1"),
        ("group 3: stage 1, 2 GPUs", ("g6", "g7"), "stage 1")]


def test_a_fused_segment_splits_into_its_compute_and_tp_collectives():
    # 1 ms, a 0.5 ms TP all-reduce, 2 ms; on a straggler 1.5x slower the compute takes
    # 4.5 ms and the collective its 0.5: the segment is 5 ms long.
    steps = (Compute(1e-3, "qkv"), Collective("all_reduce", 1e6, "ar", exclusive=True),
             Compute(2e-3, "mlp"))
    op = Fused(steps, (1e-3, 0.5e-3, 2e-3), compute_s=3e-3, comm_s=0.5e-3)
    timeline = Timeline("g", 0, ("g0",), ((1.0, 1.005, "compute", op.label),
                                          (1.005, 1.006, "pp transfer", "recv")), (),
                        (op, None))
    got = fine_segments(timeline)
    assert [(k, label) for _, _, k, label in got] == [
        ("compute", "qkv"), ("tp comm", "ar"), ("compute", "mlp"), ("pp transfer", "recv")]
    ends = [x for s, e, _, _ in got for x in (s, e)]
    assert ends == pytest.approx([1.0, 1.0015, 1.0015, 1.002, 1.002, 1.005, 1.005, 1.006],
                                 abs=1e-12)


def test_every_gpu_has_a_schedule_that_covers_its_busy_time(tiny_report):
    gpus = {g.gpu: g for g in tiny_report.per_gpu}
    drawn = [gpu for t in tiny_report.timelines for gpu in t.gpus]
    assert sorted(drawn) == sorted(gpus)  # each GPU in exactly one schedule
    for timeline in tiny_report.timelines:
        gpu = gpus[timeline.gpus[0]]
        fine = fine_segments(timeline)
        compute = sum(e - s for s, e, kind, _ in fine if kind == "compute")
        assert compute == pytest.approx(gpu.compute_s, rel=1e-9)
        # Split or not, the segments cover the same time.
        assert sum(e - s for s, e, _, _ in fine) == pytest.approx(
            sum(e - s for s, e, _, _ in timeline.segments), rel=1e-12)
        assert any(kind == "tp comm" for _, _, kind, _ in fine)
        for (_, end, _, _), (start, _, _, _) in zip(timeline.segments,
                                                   timeline.segments[1:]):
            assert start >= end - 1e-15  # the main stream's segments do not overlap


def test_the_link_map_bins_every_link_by_class_and_place(tiny_report):
    # tiny: the switch preset, 8 GPUs on one node, each joined to one switch by a link
    # each way: two classes, one place, 8 links each.
    links = tiny_report.link_map
    assert links.classes == ("gpu→nvswitch (nvlink)", "nvswitch→gpu (nvlink)")
    assert links.columns == ("0",) and links.count == ((8,), (8,))
    # The hottest cell is the hottest link the report's bottlenecks name, and the mean
    # is at most the peak.
    top = tiny_report.bottlenecks["top_links_by_utilisation"][0]
    assert max(max(row) for row in links.peak) == pytest.approx(top["utilisation"], rel=1e-9)
    for peak, mean in zip(links.peak, links.mean):
        assert 0 < mean[0] <= peak[0] + 1e-15


def test_places_beyond_the_columns_are_binned_in_runs():
    from distsim_gpu.topology import build_cluster

    topo = build_cluster({"preset": "dgx-a100", "nodes": 5, "fabric": "fat-tree"})
    # GPU 0 of node n carries 0.1·n + 0.05, GPU 1 0.1·n: one class, five places.
    ids = [(f"n{n}.gpu{g}", f"n{n}.nvswitch") for n in range(5) for g in (0, 1)]
    values = [0.1 * n + 0.05 * (g == 0) for n in range(5) for g in (0, 1)]
    ids.append(("not", "a link"))  # a flow-network link outside the topology: skipped
    values.append(1.0)
    full = bin_links(topo, ids, values)
    assert full.classes == ("gpu→nvswitch (nvlink)",)
    assert full.columns == ("0", "1", "2", "3", "4") and full.count == ((2,) * 5,)
    assert full.peak[0] == pytest.approx([0.05, 0.15, 0.25, 0.35, 0.45])
    assert full.mean[0] == pytest.approx([0.025, 0.125, 0.225, 0.325, 0.425])
    binned = bin_links(topo, ids, values, max_columns=2)
    assert binned.columns == ("0–2", "3–4") and binned.count == ((6, 4),)
    assert binned.peak[0] == pytest.approx([0.25, 0.45])
    assert binned.mean[0] == pytest.approx([0.125, 0.375])


def test_a_links_class_is_its_tiers_and_kind_and_its_place_its_node():
    from distsim_gpu.topology import build_cluster

    topo = build_cluster({"preset": "dgx-a100", "nodes": 2,
                          "fabric": {"kind": "fat-tree", "nics_per_leaf": 8}})
    assert link_class(topo, "n1.gpu3", "n1.nvswitch") == ("gpu→nvswitch (nvlink)", "node", 1)
    nic_leaf = next(link for link in topo.links()
                    if link.src == "n1.nic2" and topo.device(link.dst).kind == "switch")
    label, where, number = link_class(topo, nic_leaf.src, nic_leaf.dst)
    assert label.startswith("nic→leaf") and (where, number) == ("node", 1)
    up = next(link for link in topo.links()
              if topo.device(link.src).kind == "switch" and
              topo.device(link.dst).kind == "switch")
    label, where, number = link_class(topo, up.src, up.dst)
    assert where == re.sub(r"\d+", "", up.src) and number == topo.device(up.src).index


def test_the_page_names_its_figures_and_the_iteration_and_needs_no_network(tiny_report):
    page = html_report.run_report_html(tiny_report, "the summary")
    for title in TITLES:
        assert f'"text":"{title}"' in page.replace(": ", ":")
    assert format_duration(tiny_report.iteration_time_s) in page
    assert page.count("<script") >= len(TITLES)
    # Plotly's JavaScript inlined once; nothing fetched from elsewhere.
    assert page.count("plotly.js v") >= 1
    assert not re.search(r"<script[^>]+src=", page)
    assert "cdn.plot.ly" not in page.split("plotly.js v", 1)[0]
    assert "<pre>the summary</pre>" in page


def test_the_same_run_writes_the_same_page(tiny_report):
    """Byte for byte: the figures' elements are named by their place, not by Plotly's
    random ids (a report kept beside its run's files diffs clean on a rerun)."""
    page = html_report.run_report_html(tiny_report, "the summary")
    assert page == html_report.run_report_html(tiny_report, "the summary")
    assert [f"figure-{n}" for n in range(1, len(TITLES) + 1)] == re.findall(
        r'<div id="(figure-\d+)"', page)


def test_many_gpus_are_drawn_as_few_rows(tmp_path, tiny, write_scenario):
    data = tiny(cluster={"preset": "switch", "gpus": 96},
                parallelism={"tp": 2, "pp": 2, "dp": 24}, training={"global_batch": 48})
    report = run_scenario(load_scenario(write_scenario(tmp_path / "big.yaml", data)))
    fig = html_report.timeline_figure(report)
    rows = fig.layout.yaxis.ticktext
    assert len(rows) == len(report.groups()) < 96
    assert sum(int(re.search(r"(\d+) GPU", r)[1]) for r in rows) == 96
    breakdown = html_report.breakdown_figure(report)
    assert len(breakdown.data[0].x) == len(report.groups())


def test_out_writes_report_html_whole(tmp_path, tiny_report):
    result = write_output_dir(tiny_report, tmp_path / "out", plots=False)
    assert "report.html" in result.files and "report.html" in OUTPUT_FILES
    text = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "Bottlenecks" in text  # the terminal summary, verbatim


def test_without_plotly_the_run_writes_the_rest_and_says_what_to_install(
        capsys, tmp_path, tiny, write_scenario, monkeypatch):
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    path = write_scenario(tmp_path / "t.yaml", tiny())
    status = main(["run", str(path), "--out", str(tmp_path / "o"), "--no-trace"])
    _, err = capsys.readouterr()
    assert status == 0
    names = {p.name for p in (tmp_path / "o").iterdir()}
    assert "summary.json" in names and "report.html" not in names
    notes = [line for line in err.splitlines() if "report.html" in line]
    assert notes == ["distsim: note: report.html skipped: report.html needs Plotly "
                     "(pip install 'distsim-gpu[html]')"]


def test_a_report_of_many_schedules_stays_small(tiny_report):
    # Thousands of segments closer than a pixel become a few: the page's size follows
    # what can be seen, not how many ops ran.
    segments = [(i * 1e-6, i * 1e-6 + 0.5e-6, "compute", f"op {i}") for i in range(100_000)]
    assert len(merge_segments(segments, resolution_s=1e-3)) == 1
    assert math.isclose(merge_segments(segments, 1e-3)[0][1], 99_999e-6 + 0.5e-6)


def test_a_sweep_writes_its_curves_into_report_html(tmp_path, tiny, write_scenario):
    from distsim_gpu.scenarios.study.sweep import run_sweep

    path = write_scenario(tmp_path / "t.yaml", tiny())
    result = run_sweep(path, ["cluster.link_bandwidth=50 GB/s,200 GB/s",
                              "training.micro_batch=1,2"], out_dir=tmp_path / "sweep",
                       workers=1, progress=False)
    assert "report.html" in result.files
    page = (tmp_path / "sweep" / "report.html").read_text(encoding="utf-8")
    compact = page.replace(": ", ":")
    for metric in ("iteration_time_s", "samples_per_s", "model_tflops_per_gpu", "mfu"):
        assert f'"text":"{metric} against cluster.link_bandwidth"' in compact
    # One curve per micro-batch, two points each, at the bandwidths in the unit given.
    assert compact.count('"name":"training.micro_batch=1"') == 4
    assert "cluster.link_bandwidth (GB\\u002fs)" in page  # Plotly's JSON escapes "/"


def test_a_sweep_axis_keeps_the_unit_the_grid_gave(tmp_path, tiny, write_scenario, capsys):
    """A Gbps grid is plotted in Gbps (50, 200), not in bytes per second."""
    from distsim_gpu.scenarios.cli.main import main
    from distsim_gpu.scenarios.study.sweep_figures import _numeric_axis

    path = write_scenario(tmp_path / "t.yaml", tiny())
    assert main(["sweep", str(path), "--grid", "cluster.link_bandwidth=50 Gbps,200 Gbps",
                 "--out", str(tmp_path / "sweep"), "--workers", "1"]) == 0
    page = (tmp_path / "sweep" / "report.html").read_text(encoding="utf-8")
    assert "cluster.link_bandwidth (Gbps)" in page
    assert _numeric_axis(["50 Gbps", "200 Gbps"]) == ([50.0, 200.0], "Gbps")
    assert _numeric_axis(["50 Gb/s", "25 GB/s"]) == ([6.25e9, 25e9], "B/s")  # mixed: SI


def test_compare_out_writes_the_scenarios_side_by_side(tmp_path, tiny, write_scenario,
                                                       capsys):
    a = write_scenario(tmp_path / "a.yaml", tiny())
    b = write_scenario(tmp_path / "b.yaml", tiny(training={"micro_batch": 2}))
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    assert f"wrote {out}: comparison.json, report.html" in capsys.readouterr().out
    page = (out / "report.html").read_text(encoding="utf-8").replace(": ", ":")
    for title in ("Iteration time", "Time per stage", "Memory per stage",
                  "Critical path by kind"):
        assert f'"text":"{title}"' in page
    # Both scenarios are named "tiny": each is told apart by its file.
    assert f"tiny ({a})" in page and f"tiny ({b})" in page
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0  # replaced
    (out / "mine.txt").write_text("keep")
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 2
    assert "--out" in capsys.readouterr().err


def test_a_stragglers_faster_peer_is_drawn_at_its_own_pace(tmp_path, tiny, write_scenario):
    """A straggler's TP peer computes its share and waits out the rest (its row of the
    breakdown): its timeline row draws that, not the straggler's schedule."""
    data = tiny(stragglers={"n0.gpu1": 1.5})
    report = run_scenario(load_scenario(write_scenario(tmp_path / "slow.yaml", data)))
    rows = {g.gpu: g for g in report.per_gpu}
    peer, straggler = rows["n0.gpu0"], rows["n0.gpu1"]
    assert peer.compute_s == pytest.approx(straggler.compute_s / 1.5, rel=1e-12)
    (timeline,) = [t for t in report.timelines if "n0.gpu0" in t.gpus]
    assert [(gpu, straggler_gpu) for gpu, _, straggler_gpu in timeline.paces] == [
        ("n0.gpu0", "n0.gpu1")]
    for gpu in ("n0.gpu0", "n0.gpu1"):
        fine = fine_segments(timeline, gpu)
        compute = sum(e - s for s, e, kind, _ in fine if kind == "compute")
        assert compute == pytest.approx(rows[gpu].compute_s, rel=1e-9)
        # The same time covered: the wait fills what the peer's compute no longer does.
        assert sum(e - s for s, e, _, _ in fine) == pytest.approx(
            sum(e - s for s, e, _, _ in timeline.segments), rel=1e-12)
    waits = [(s, e) for s, e, kind, label in fine_segments(timeline, "n0.gpu0")
             if label == "wait for n0.gpu1"]
    assert waits and all(kind == "tp comm" for _, _, kind, label in fine_segments(
        timeline, "n0.gpu0") if label == "wait for n0.gpu1")
    assert not any(label.startswith("wait for") for *_, label in fine_segments(timeline))
    drawn = [text for trace in html_report.timeline_figure(report).data
             for text in (trace.text if trace.text is not None else ())]
    assert any("wait for n0.gpu1" in text for text in drawn)  # the peer's row shows it
