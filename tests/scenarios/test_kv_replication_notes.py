"""Tensor parallelism wider than the key/value heads replicates them, and says so."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.run_notes import kv_replication_notes
from distsim_gpu.workloads.specs.models import get_model
from distsim_gpu.workloads.strategy.parallel import ParallelConfig


@pytest.mark.parametrize(("tp", "copies"), [(4, 0), (8, 0), (16, 2), (32, 4)])
def test_a_tp_above_the_kv_heads_names_the_copies(tp, copies):
    llama = get_model("llama3-70b")  # 64 query heads, 8 key/value heads
    notes = kv_replication_notes(llama, ParallelConfig(tp=tp))
    assert bool(notes) == bool(copies)
    if copies:
        (note,) = notes
        assert note.kind == "defaulted" and note.key == "parallelism.tp"
        assert f"each is replicated on {copies} tensor ranks" in note.message
