"""Profiled costs: times measured on real GPUs, read from a cost table
(:mod:`~distsim_gpu.workloads.cost.compute.table_io`), interpolated between measured points —
per whole layer, or per operator with the roofline filling the operators not measured.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError, closest
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.workloads.cost.compute.operators import PASSES, RECOMPUTE_GRANULARITIES
from distsim_gpu.workloads.cost.compute.roofline import CostModel, issue_timeline_s
from distsim_gpu.workloads.cost.compute.table_io import (
    CostRow,
    TableHeader,
    read_cost_table,
    write_cost_table,
)
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.gpus import canonical_gpu_name
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.specs.recompute import table_pass as recompute_table_pass
from distsim_gpu.workloads.specs.recompute_modules import DEFAULT_RECOMPUTE_MODULES

__all__ = ["TableCosts"]

_LAYER_KINDS = ("transformer_layer", "moe_layer")
_EDGE_KINDS = ("embedding", "loss")


class TableCosts:
    """Profiled costs from a cost table, for one GPU of the table.

    Lookup: rows of the same ``(gpu, kind, pass, hidden, tp, sequence_parallel)`` form a
    *group*; a group with no row is a :class:`ConfigError` naming the missing key and
    what the table has.  Within the group:

    1. a row at exactly ``(micro_batch, seq_len)`` gives its time;
    2. otherwise the points are the group's rows at the same ``seq_len`` (or, if it has
       none, all the group's rows — recorded as a warning, since attention is not linear
       in tokens across sequence lengths — keeping per token count the row nearest in
       ``seq_len``), keyed by tokens ``micro_batch·seq_len``;
    3. between two points: linear in tokens; outside them (or with one point):
       proportional to tokens from the nearest point, recorded as a warning.

    Warnings accumulate, without repeats, as run notes in :attr:`notes` (their messages in
    :attr:`warnings`; a per-instance record, no global state): rows extrapolated, kinds the
    roofline stood in for, table rows no operator matched.
    Layer kinds: ``transformer_layer`` (dense) and ``moe_layer``; the
    recompute pass reads pass ``recompute`` (full), ``recompute_selective`` or ``recompute_op``
(torchtitan's per-op checkpointing, :mod:`~distsim_gpu.workloads.specs.recompute`).  Embedding
    and loss read kinds ``embedding`` and ``loss``; expert parallelism and vocabulary size
    are not keys (a table is measured for one model family — see the header's ``model``).
    Kinds the table lacks entirely, and the optimizer step, go to ``fallback`` if one is
    given, else raise :class:`ConfigError`.

    Per operator: a table without a layer kind but with rows named after a layer's
    operators (``qkv``, ``attn_softmax``, ``mlp_fc1``, ...; pass ``bwd`` is an operator's
    whole backward, its data and weight gradients together) is read operator by operator
    when the fallback is a roofline (:class:`RooflineCosts`): each operator the table
    measured at this shape's group takes the table's time, every other operator the
    roofline's, and the layer is their sum.  A table none of whose kinds names a layer, an
    edge or one of the layer's operators is an error (it would give the roofline's time
    unchanged); kinds that match nothing beside ones that do are noted as ignored.
    """

    __slots__ = ("_groups", "_warnings", "fallback", "gpu", "header", "rows", "source")

    def __init__(self, header: TableHeader, rows: Iterable[CostRow], *, gpu: str | None = None,
                 fallback: CostModel | None = None, source: str | None = None) -> None:
        self.header = header
        self.rows = tuple(rows)
        self.source = source
        self.fallback = fallback
        gpus = sorted({r.gpu for r in self.rows})
        if not gpus:
            raise ConfigError("cost table has no rows", source=source)
        if gpu is None:
            if len(gpus) > 1:
                raise ConfigError("cost table holds several GPUs; choose one", source=source,
                                  key="gpu", hint="valid: " + ", ".join(gpus))
            chosen = gpus[0]
        else:
            chosen = canonical_gpu_name(gpu)
            if chosen not in gpus:
                raise ConfigError(f"cost table has no rows for GPU {gpu!r}", source=source,
                                  key="gpu", hint=closest(chosen, gpus))
        self.gpu = chosen
        groups: dict[tuple[Any, ...], list[CostRow]] = {}
        for row in self.rows:
            if row.gpu == chosen:
                groups.setdefault((row.kind, row.pass_, row.hidden, row.tp,
                                   row.sequence_parallel), []).append(row)
        self._groups = groups
        self._warnings: list[RunNote] = []

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, gpu: str | None = None,
                  fallback: CostModel | None = None) -> TableCosts:
        """Read a table with :func:`read_cost_table` and select ``gpu`` (optional when the
        table holds one GPU)."""
        header, rows = read_cost_table(path)
        return cls(header, rows, gpu=gpu, fallback=fallback, source=os.fspath(path))

    def to_file(self, path: str | os.PathLike[str]) -> None:
        """Write every row (all GPUs) back with :func:`write_cost_table`."""
        write_cost_table(path, self.header, self.rows)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The messages of :attr:`notes`, oldest first."""
        return tuple(note.message for note in self._warnings)

    @property
    def notes(self) -> tuple[RunNote, ...]:
        """What the lookups assumed so far (extrapolated rows, the roofline standing in
        for kinds the table lacks, kinds ignored), oldest first."""
        return tuple(self._warnings)

    def kinds(self) -> list[str]:
        """Kinds this table measures for the selected GPU."""
        return sorted({key[0] for key in self._groups})

    def _warn(self, text: str, kind: str = "extrapolated") -> None:
        note = RunNote(kind, f"cost table {os.path.basename(self.source or 'given')}: {text}",
                       "compute.costs")
        if note not in self._warnings:
            self._warnings.append(note)

    def lookup(self, kind: str, pass_: str, *, micro_batch: int, seq_len: int, hidden: int,
               tp: int = 1, sequence_parallel: bool = False) -> float:
        """Seconds for ``kind``/``pass_`` at this shape, by the rule in the class docstring."""
        group = self._groups.get((kind, pass_, hidden, tp, sequence_parallel))
        if not group:
            raise ConfigError(
                f"cost table has no {kind!r} {pass_!r} rows for gpu {self.gpu}, "
                f"hidden {hidden}, tp {tp}, sequence_parallel {str(sequence_parallel).lower()}",
                source=self.source, hint="the table has: " + self._available(kind, pass_))
        for row in group:
            if row.micro_batch == micro_batch and row.seq_len == seq_len:
                return row.time_s
        tokens = micro_batch * seq_len
        where = (f"{kind} {pass_} hidden {hidden} tp {tp} at micro_batch {micro_batch}, "
                 f"seq_len {seq_len}")
        candidates = [r for r in group if r.seq_len == seq_len]
        if not candidates:
            measured = sorted({r.seq_len for r in group})
            self._warn(f"{where}: seq_len {seq_len} not measured (have "
                       f"{', '.join(map(str, measured))}); interpolated over tokens")
            candidates = group
        by_tokens: dict[int, CostRow] = {}
        for row in candidates:
            best = by_tokens.get(row.tokens)
            if best is None or abs(row.seq_len - seq_len) < abs(best.seq_len - seq_len):
                by_tokens[row.tokens] = row
        points = sorted(by_tokens.items())
        low = [p for p in points if p[0] <= tokens]
        high = [p for p in points if p[0] >= tokens]
        if low and high:
            (t0, r0), (t1, r1) = low[-1], high[0]
            if t0 == t1:
                return r0.time_s
            return r0.time_s + (r1.time_s - r0.time_s) * (tokens - t0) / (t1 - t0)
        nearest_tokens, nearest = (low[-1] if low else high[0])
        self._warn(f"{where}: {tokens} tokens outside the measured "
                   f"{points[0][0]}..{points[-1][0]}; extrapolated proportionally to tokens")
        return nearest.time_s * tokens / nearest_tokens

    def _available(self, kind: str, pass_: str) -> str:
        same = sorted((k[2], k[3], k[4]) for k in self._groups if k[0] == kind and
                      k[1] == pass_)
        if same:
            return "; ".join(f"hidden {h} tp {t} sequence_parallel {str(sp).lower()}"
                             for h, t, sp in same)
        pairs = sorted({f"{k[0]}/{k[1]}" for k in self._groups})
        return "kinds/passes " + ", ".join(pairs)

    def _has_kind(self, kind: str) -> bool:
        return any(key[0] == kind for key in self._groups)

    def layer_time_s(self, pass_: str, model: ModelSpec, shard: LayerShard) -> float:
        """Looked-up seconds for one pass of layer ``shard.layer_index`` (ep is not a
        key)."""
        check_choice(pass_, PASSES, key="pass")
        check_choice(shard.recompute, RECOMPUTE_GRANULARITIES, key="recompute")
        kind = "moe_layer" if model.is_moe_layer(shard.layer_index) else "transformer_layer"
        table_pass = recompute_table_pass(shard.recompute) if pass_ == "recompute" else pass_
        if not self._has_kind(kind) and self.fallback is not None:
            if hasattr(self.fallback, "operator_times_s"):
                return self._by_operator(pass_, model, shard)
            self._warn(f"no {kind} rows: the fallback cost model times it", "defaulted")
            return self.fallback.layer_time_s(pass_, model, shard)
        if table_pass == "recompute_selective" and (
                shard.recompute_modules != DEFAULT_RECOMPUTE_MODULES):
            raise ConfigError("a cost table's recompute_selective rows time core attention's "
                              "recomputation, not the submodules of recompute_modules",
                              key="training.recompute_modules", source=self.source,
                              hint="compute.costs: roofline, or remove recompute_modules")
        if model.attention_pair_fraction(shard.layer_index, shard.seq_len) < 0.5:
            self._warn(f"its {kind} rows time the layers that attend within "
                       f"model.attention_window as layers that attend in full", "defaulted")
        return self.lookup(kind, table_pass, micro_batch=shard.micro_batch,
                           seq_len=shard.seq_len, hidden=model.hidden, tp=shard.tp,
                           sequence_parallel=shard.sequence_parallel)

    def operator_breakdown_s(self, pass_: str, model: ModelSpec,
                             shard: LayerShard) -> dict[str, tuple[float, str]]:
        """Seconds per operator of one pass and where each came from (``table`` or
        ``roofline``).  Needs a roofline fallback."""
        fallback: Any = self.fallback
        if fallback is None or not hasattr(fallback, "operator_times_s"):
            raise ConfigError("per-operator costs need a roofline fallback",
                              source=self.source, hint="TableCosts(..., fallback="
                                                       "RooflineCosts(gpu))")
        work = fallback.layer_work(pass_, model, shard)
        table_pass = "fwd" if pass_ == "recompute" else pass_
        tp, sequence_parallel = shard.tp, shard.sequence_parallel
        out: dict[str, tuple[float, str]] = {}
        for name, roofline_s in fallback.operator_times_s(work).items():
            group = self._groups.get((name, table_pass, model.hidden, tp,
                                      sequence_parallel))
            if group:
                out[name] = (self.lookup(name, table_pass, micro_batch=shard.micro_batch,
                                         seq_len=shard.seq_len, hidden=model.hidden, tp=tp,
                                         sequence_parallel=sequence_parallel), "table")
            else:
                out[name] = (roofline_s, "roofline")
        return out

    def _by_operator(self, pass_: str, model: ModelSpec, shard: LayerShard) -> float:
        """The measured operators' times and the roofline's for the rest, in sequence, each
        operator's kernels no earlier than the host issues them (as the roofline does)."""
        fallback: Any = self.fallback
        times = self.operator_breakdown_s(pass_, model, shard)
        work = fallback.layer_work(pass_, model, shard)
        self._check_operators(set(times), shard, model.hidden)
        if all(source == "roofline" for _, source in times.values()):
            return fallback.work_time_s(work)
        launches: dict[str, int] = {}
        for item in work.kernels:
            launches[item.base_name] = (launches.get(item.base_name, 0)
                                        + item.count * item.launches)
        return issue_timeline_s(((seconds, launches.get(name, 0))
                                 for name, (seconds, _) in times.items()),
                                work.stack.host_s_per_kernel(work.pass_))

    def _check_operators(self, operators: set[str], shard: LayerShard, hidden: int) -> None:
        """Refuse a table whose kinds name nothing the run reads; note the kinds that
        match no operator, and the operators measured only at other shapes."""
        kinds = set(self.kinds())
        known = operators | set(_LAYER_KINDS) | set(_EDGE_KINDS)
        if not kinds & known:
            raise ConfigError(
                f"the cost table's kinds ({', '.join(sorted(kinds))}) match no layer kind and "
                "no operator of the layer: every time would be the roofline's",
                key="compute.costs", source=self.source,
                hint="valid kinds: " + ", ".join(sorted(known)))
        unmatched = sorted(kinds - known)
        if unmatched:
            self._warn(f"kinds {', '.join(unmatched)} match no operator of the layer and are "
                       "ignored", "ignored")
        elsewhere = sorted(
            name for name in kinds & operators
            if not any(k[0] == name and k[2:] == (hidden, shard.tp, shard.sequence_parallel)
                       for k in self._groups))
        if elsewhere:
            self._warn(f"operators {', '.join(elsewhere)} measured only at other shapes than "
                       f"hidden {hidden} tp {shard.tp}: the roofline times them", "ignored")

    def _edge(self, kind: str, pass_: str, model: ModelSpec, micro_batch: int, seq_len: int,
              tp: int, sequence_parallel: bool) -> float:
        check_choice(pass_, PASSES, key="pass")
        if pass_ == "recompute":
            return 0.0
        if not self._has_kind(kind) and self.fallback is not None:
            self._warn(f"no {kind} rows: the fallback cost model times it", "defaulted")
            method = (self.fallback.embedding_time_s if kind == "embedding"
                      else self.fallback.loss_time_s)
            return method(pass_, model, micro_batch=micro_batch, seq_len=seq_len, tp=tp,
                          sequence_parallel=sequence_parallel)
        return self.lookup(kind, pass_, micro_batch=micro_batch, seq_len=seq_len,
                           hidden=model.hidden, tp=tp, sequence_parallel=sequence_parallel)

    def embedding_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int,
                         seq_len: int, tp: int = 1,
                         sequence_parallel: bool = False) -> float:
        """Kind ``embedding`` (or the fallback); recompute is 0."""
        return self._edge("embedding", pass_, model, micro_batch, seq_len, tp,
                          sequence_parallel)

    def loss_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int, seq_len: int,
                    tp: int = 1, sequence_parallel: bool = False) -> float:
        """Kind ``loss`` (or the fallback); recompute is 0."""
        return self._edge("loss", pass_, model, micro_batch, seq_len, tp, sequence_parallel)

    def optimizer_step_time_s(self, params_on_gpu: float) -> float:
        """Delegated to the fallback; a table does not measure optimizer steps."""
        if self.fallback is None:
            raise ConfigError("a cost table has no optimizer step time", source=self.source,
                              hint="give TableCosts a fallback, e.g. RooflineCosts(gpu)")
        return self.fallback.optimizer_step_time_s(params_on_gpu)


