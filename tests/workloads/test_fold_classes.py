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
