"""Classes of alike replicas: colour refinement over units, spanning flows and links.

Small hand-made structures whose answer is known, and the refinement's defining
property: renaming units and links renames the classes and changes nothing else.
"""

from __future__ import annotations

from distsim_gpu.workloads.iteration.fold_classes import Member, SpanningFlow, alike_classes
from hypothesis import given
from hypothesis import strategies as st

CAPACITY = 1e9


def sends(*links_per_unit: tuple[str, ...]) -> list[Member]:
    """One flow class: unit u crosses ``links_per_unit[u]``, one stream each."""
    return [Member(unit, 0, {link: (CAPACITY, (1.0,)) for link in links}, "p2p")
            for unit, links in enumerate(links_per_unit)]


def ring(name: str, *links: str) -> SpanningFlow:
    return SpanningFlow({link: (1.0,) for link in links}, ("dp", name))


def test_units_on_links_alike_and_apart_form_one_class():
    assert alike_classes([sends(("a",), ("b",), ("c",))], 3) == [[0, 1, 2]]


def test_a_unit_sharing_its_link_is_unlike_one_alone():
    # Units 0 and 1 share link "s"; unit 2 has "t" to itself.
    assert alike_classes([sends(("s",), ("s",), ("t",))], 3) == [[0, 1], [2]]


def test_spanning_flows_of_one_kind_met_alike_keep_units_together():
    # Each unit's link carries one ring; both rings cross one more link of their own.
    flows = [ring("r", "a", "x"), ring("r", "b", "y")]
    assert alike_classes([sends(("a",), ("b",))], 2, flows) == [[0, 1]]


def test_rings_held_back_elsewhere_tell_units_apart():
    """The case the stream counts missed: each unit's link carries one ring's stream, but
    ring A shares a further link with a third flow and ring B does not, so A runs slower
    and the unit it meets is not the other's image."""
    flows = [ring("r", "a", "x"), ring("r", "b", "y"), ring("other", "x")]
    assert alike_classes([sends(("a",), ("b",))], 2, flows) == [[0], [1]]
    # The same third flow on B's far link too restores the symmetry.
    flows.append(ring("other", "y"))
    assert alike_classes([sends(("a",), ("b",))], 2, flows) == [[0, 1]]


def test_unlike_spanning_flows_tell_units_apart():
    flows = [ring("reduce_scatter", "a"), ring("all_gather", "b")]
    assert alike_classes([sends(("a",), ("b",))], 2, flows) == [[0], [1]]


def test_the_split_propagates_along_shared_links():
    """A chain: units 0-1 share a link, 1-2 another, and unit 3 is alone on its own two
    links.  Refinement splits the chain's ends from its middle over several rounds."""
    members = sends(("l01",), ("l01", "l12"), ("l12", "l23"), ("l23",))
    assert alike_classes([members], 4) == [[0, 3], [1, 2]]


@st.composite
def structures(draw: st.DrawFn) -> tuple[list[list[Member]], list[SpanningFlow], int]:
    """A few units crossing a few links in one or two flow classes, and a few spanning
    flows of one or two kinds."""
    units = draw(st.integers(2, 5))
    links = [f"l{i}" for i in range(draw(st.integers(1, 6)))]
    some_links = st.lists(st.sampled_from(links), min_size=1, max_size=3, unique=True)
    classes = [[Member(u, 0, {link: (CAPACITY, (draw(st.sampled_from([1.0, 2.0])),))
                              for link in draw(some_links)}, f"class{k}")
                for u in range(units)] for k in range(draw(st.integers(1, 2)))]
    flows = [SpanningFlow({link: (1.0,) for link in draw(some_links)},
                          draw(st.sampled_from(["rs", "ag"])))
             for _ in range(draw(st.integers(0, 3)))]
    return classes, flows, units


@given(structures(), st.randoms(use_true_random=False))
def test_renaming_units_and_links_renames_the_classes(structure, random):
    classes, flows, units = structure
    order = list(range(units))
    random.shuffle(order)  # unit u becomes order[u]
    rename = {f"l{i}": f"m{j}" for i, j in enumerate(random.sample(range(6), 6))}
    moved = [sorted((Member(order[m.unit], m.slot, {rename[k]: v for k, v in m.links.items()},
                            m.fixed) for m in members), key=lambda m: m.unit)
             for members in classes]
    moved_flows = [SpanningFlow({rename[k]: v for k, v in f.links.items()}, f.fixed)
                   for f in flows]
    before = {frozenset(order[u] for u in c) for c in alike_classes(classes, units, flows)}
    after = {frozenset(c) for c in alike_classes(moved, units, moved_flows)}
    assert before == after


@given(structures())
def test_the_classes_partition_the_units(structure):
    classes, flows, units = structure
    found = alike_classes(classes, units, flows)
    assert sorted(u for c in found for u in c) == list(range(units))
    assert all(c == sorted(c) for c in found)
    assert [c[0] for c in found] == sorted(c[0] for c in found)


def reference_classes(flow_classes: list[list[Member]], units: int,
                      spanning: list[SpanningFlow]) -> list[list[int]]:
    """Colour refinement as first written (tuples compared as they are, every link
    coloured on its own, run until nothing splits): the integer encoding, the grouping of
    alike links and the stop once every unit stands alone must give exactly its classes."""
    def relabel(signatures: list) -> list[int]:
        ids: dict = {}
        return [ids.setdefault(signature, len(ids)) for signature in signatures]

    links = sorted({link for members in flow_classes for m in members for link in m.links}
                   | {link for flow in spanning for link in flow.links})
    label, flow_label, counts = [0] * units, relabel([f.fixed for f in spanning]), None
    while True:
        colour = dict(zip(links, relabel([repr((
            sorted((k, label[m.unit], m.links[link]) for k, members in enumerate(flow_classes)
                   for m in members if link in m.links),
            sorted((flow_label[s], f.links[link]) for s, f in enumerate(spanning)
                   if link in f.links))) for link in links]), strict=True))
        signatures: list[list] = [[label[u]] for u in range(units)]
        for members in flow_classes:
            for m in members:
                signatures[m.unit].append((m.slot, m.fixed, sorted(
                    (what, colour[link]) for link, what in m.links.items())))
        label = relabel([repr(signature) for signature in signatures])
        flow_label = relabel([repr((flow_label[s], sorted(
            (what, colour[link]) for link, what in f.links.items())))
            for s, f in enumerate(spanning)])
        now = (len(set(label)), len(set(flow_label)), len(set(colour.values())))
        if now == counts:
            break
        counts = now
    classes: dict[int, list[int]] = {}
    for unit, class_id in enumerate(label):
        classes.setdefault(class_id, []).append(unit)
    return list(classes.values())


@st.composite
def richer(draw: st.DrawFn) -> tuple[list[list[Member]], list[SpanningFlow], int]:
    """More units than links, several slots per unit, two latencies, flows of two kinds
    with one or two streams: structures where the refinement runs several rounds."""
    units = draw(st.integers(1, 7))
    slots = draw(st.integers(1, 2))
    links = [f"l{i}" for i in range(draw(st.integers(1, 5)))]
    some_links = st.lists(st.sampled_from(links), min_size=1, max_size=3, unique=True)
    streams = st.sampled_from([(1.0,), (2.0,), (1.0, 0.0)])
    classes = [[Member(u, slot, {link: (CAPACITY, draw(streams)) for link in draw(some_links)},
                       (f"class{k}", draw(st.sampled_from([1e-6, 2e-6]))))
                for u in range(units) for slot in range(slots)]
               for k in range(draw(st.integers(1, 3)))]
    flows = [SpanningFlow({link: draw(streams) for link in draw(some_links)},
                          draw(st.sampled_from(["rs", "ag"])))
             for _ in range(draw(st.integers(0, 4)))]
    return classes, flows, units


@given(st.one_of(structures(), richer()))
def test_the_classes_are_the_plain_refinements(structure):
    classes, flows, units = structure
    assert alike_classes(classes, units, flows) == reference_classes(classes, units, flows)


def test_units_told_apart_stop_the_refinement_with_the_same_classes():
    """Units 0 and 1 differ at once (one shares its link with a ring held back on a third
    link); the rings would go on splitting after that, which cannot change the classes."""
    members = sends(("a",), ("b",))
    flows = [ring("r", "a", "x"), ring("r", "b", "y"), ring("other", "x", "z"),
             ring("other", "z", "w")]
    assert alike_classes([members], 2, flows) == [[0], [1]]
    assert reference_classes([members], 2, flows) == [[0], [1]]


def test_a_ring_on_a_link_is_not_a_unit_putting_the_same_streams_there():
    """Units 0 and 2 share link "a"; unit 1's link "b" carries a ring whose streams on it
    equal a unit's: a crosser that is a spanning flow must not pass for a member (their
    integer codes lie apart), so unit 1 is unlike the other two."""
    members = sends(("a",), ("b",), ("a",))
    flows = [SpanningFlow({"b": (CAPACITY, (1.0,))}, ("dp", "r"))]
    assert alike_classes([members], 3, flows) == [[0, 2], [1]]
    assert reference_classes([members], 3, flows) == [[0, 2], [1]]


def test_units_are_told_apart_by_the_spanning_flows_they_start_and_wait_for():
    """Folded inside expert blocks, each block's all-to-all lane is a spanning flow that
    only its block's units start and wait for.  Units with nothing else to tell them
    apart are unlike where their blocks' lanes are (one crosses a link another flow
    holds back), and alike where the lanes are; ignoring whose lane is whose would class
    all four together."""
    def lane(units: tuple[int, ...], *links: str) -> SpanningFlow:
        return SpanningFlow({link: (1.0,) for link in links}, ("ep", "a2a"), units)

    held = [lane((0, 1), "a", "x"), lane((2, 3), "b"), ring("other", "x")]
    assert alike_classes([], 4, held) == [[0, 1], [2, 3]]
    alike = [lane((0, 1), "a", "x"), lane((2, 3), "b", "y"), ring("other", "x"),
             ring("other", "y")]
    assert alike_classes([], 4, alike) == [[0, 1, 2, 3]]
