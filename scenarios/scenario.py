"""Scenarios: one YAML file describes a training job on a cluster; running it simulates one
iteration and returns a :class:`~scenarios.report.record.Report`.

A scenario file (read with ``yaml.safe_load`` only)::

    name: gpt3-175b-64gpu                       # default: the file's stem
    description: free text                      # optional
    cluster: {preset: dgx-a100, nodes: 8, fabric: fat-tree}
                                                # any cluster spec (topology.build_cluster),
                                                # a preset name, or the path of a cluster
                                                # YAML file, relative to the scenario file
    model: {preset: gpt3-175b, layers: 48}      # a preset with overrides, every field
                                                # written out, or just a preset name
    parallelism: {tp: 8, pp: 8, dp: 1, ep: 1, sequence_parallel: false, schedule: 1f1b,
                  interleave: 1, zero: 0, fsdp: false, order: tp-dp-pp,
                  bucket_params: 40000000, grad_reduce_precision: fp32}
                                                # also bucketing, overlap_param_gather,
                                                # align_param_gather, tp_comm_overlap
                                                # (+ _splits, _sms): default the stack's
                                                # (docs/overlaps.md)
    training: {micro_batch: 1, global_batch: 64, recompute: full, precision: bf16,
               seq_len: 2048}                   # seq_len: default the model's; also
                                                # data_loader: {sample_time: "4 ms",
                                                #   workers: 4} (workloads.strategy.data_loading)
    compute:
      gpu: a100-80gb                            # a GPU preset, or a mapping (gpu_from_mapping);
                                                # default: the cluster's GPU when known
      costs: roofline                           # or a cost table path (relative to the file);
                                                # the roofline is then its fallback
      matmul_efficiency: 0.8                    # roofline knobs, all optional:
      attention_efficiency: 0.5                 #   (default: by the stack's flash kernel and the
                                                #   GPU's architecture), memory_efficiency,
                                                #   launch_overhead, host_overhead (host s per
                                                #   forward kernel; default the stack's),
                                                #   gemm_tiles, gemm_k_half, causal,
                                                #   optimizer_bytes_per_param, attention
                                                #   (flash | unfused: pre-FlashAttention),
                                                #   comm_sms (SMs overlapped communication
                                                #   kernels hold; default 0), cuda_graphs
                                                #   (layer passes as CUDA graphs; default
                                                #   the stack's)
      stack: megatron-core                      # software stack: megatron-core, nemo,
                                                #   megatron-lm-2021, megatron-deepspeed,
                                                #   transformer-engine, torch-compile
    communication: {algorithm: auto, protocol: auto}   # collectives.comm_params_from_mapping
    simulation: {fidelity: coflow, seed: 0}     # fidelity: coflow | step
    stragglers: {n0.gpu3: 1.2}                  # compute slowdown factor per GPU; also
                                                # jitter: {distribution: lognormal, sigma: 0.05},
                                                # slow_nodes: {rate: 0.01, factor: 1.3}
    faults: [{target: nic, name: n0.nic3, kind: down, at_s: 0}]   # topology.faults
    jobs: [{name: a, model: …, parallelism: …, training: …, placement: packed}]
    goodput: {mtbf: {gpu: "50000 h"}, restart: "10 min", storage_bandwidth: "100 GB/s"}
                                                # the last three: scenarios.disruptions

Every key is checked; a wrong one is named by its dotted path (``parallelism.tp``,
``cluster.nic.bandwidth``) with the file, its line and the closest valid key.
``overrides`` (the command line's ``--set KEY=VALUE``) change any field by dotted path before
validation; errors in an overridden value name ``--set`` as their source.

:meth:`Scenario.resolved` is the configuration the run used with every default filled in,
in SI units, *in this same schema*: written back as a scenario file it reproduces the run.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from distsim_gpu.collectives import CommParams, comm_params_from_mapping
from distsim_gpu.scenarios.compute_section import (
    COMPUTE_KEYS,
    gpu_of,
    resolved_compute,
    roofline_of,
)
from distsim_gpu.scenarios.disruptions import (
    GoodputSpec,
    goodput_from_mapping,
    jobs_from_list,
    simulate,
    spec_of,
)
from distsim_gpu.scenarios.report.record import JobRun, Report, RunSetup, build_report
from distsim_gpu.scenarios.run_notes import run_notes
from distsim_gpu.simcore.config import (
    check_bool,
    check_keys,
    check_mapping,
    check_number,
    check_whole,
    path_key,
    set_path,
)
from distsim_gpu.simcore.errors import ConfigError, DistsimError, closest
from distsim_gpu.simcore.units import bandwidth_text, bandwidths_with_units
from distsim_gpu.simcore.yamlfile import line_of, read_yaml
from distsim_gpu.topology import Topology, build_cluster, list_presets
from distsim_gpu.topology.faults import Fault, apply_faults, faults_from_list
from distsim_gpu.workloads.cost.compute import (
    CostModel,
    RooflineCosts,
    TableCosts,
)
from distsim_gpu.workloads.cost.traffic import rank_training, seq_len_of
from distsim_gpu.workloads.iteration.records import IterationSpec
from distsim_gpu.workloads.job.stragglers import (
    MAX_FACTOR as MAX_STRAGGLER_FACTOR,
)
from distsim_gpu.workloads.job.stragglers import (
    STRAGGLER_KEYS,
    StragglerModel,
    straggler_model_from_mapping,
)
from distsim_gpu.workloads.specs.gpus import GpuSpec
from distsim_gpu.workloads.specs.models import ModelSpec, model_from_mapping
from distsim_gpu.workloads.specs.moe_routing import routed_comm
from distsim_gpu.workloads.strategy.framework_names import COMPUTE_NAMES
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
    parallel_from_mapping,
    training_from_mapping,
)

__all__ = [
    "COMPUTE_KEYS",
    "SCENARIO_KEYS",
    "SIMULATION_KEYS",
    "Scenario",
    "load_scenario",
    "run_scenario",
    "scenario_from_mapping",
    "stack_overlap_defaults",
]

SCENARIO_KEYS = ("name", "description", "cluster", "model", "parallelism", "training",
                 "compute", "communication", "simulation", "stragglers", "faults", "jobs",
                 "goodput")
SIMULATION_KEYS = ("fidelity", "seed", "allow_oom")
_REQUIRED = ("cluster", "model")

# A group written as a bare string is shorthand for this key (for --set into it).
_SHORTHAND = {"cluster": "preset", "cluster.fabric": "kind", "cluster.gpu": "model",
              "model": "preset", "compute.gpu": "preset"}
# GPU names hold dots (n0.gpu3): everything after "stragglers." is one key.
_DOTTED_NAMES = ("stragglers",)


# --------------------------------------------------------------------------- the type


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario: the run it simulates and what else its file says.

    ``spec`` is the validated run — cluster, model, strategy, costs, communication,
    seed, stragglers, the strategy's micro-batches per pipeline — which the iteration
    takes as it is (:func:`~scenarios.disruptions.spec_of`); the scenario reads its fields
    through it rather than holding copies.  ``cost_table`` is the absolute path of the cost
    table when ``compute.costs`` names one (the run's costs are then a :class:`TableCosts`
    falling back to ``roofline``); ``spec.source`` the scenario file (None when built from
    a mapping).
    """

    name: str
    spec: IterationSpec
    roofline: RooflineCosts
    description: str = ""
    # What goes wrong and who shares (scenarios.disruptions): faults, the straggler model
    # the factors were drawn from, the jobs sharing the cluster (name, scenario), goodput.
    faults: tuple[Fault, ...] = ()
    straggler_model: StragglerModel | None = None
    jobs: tuple[tuple[str, Scenario], ...] = ()
    goodput: GoodputSpec | None = None
    cost_table: str | None = None
    _locator: _Locator | None = field(default=None, repr=False, compare=False)

    def with_run(self, **changes: Any) -> Scenario:
        """This scenario with fields of its run replaced.  A caller that changes the
        strategy and checked it passes the micro-batches its check returned; without them
        the changed strategy is checked again when it runs."""
        if {"parallel", "training"} & changes.keys() and "microbatches" not in changes:
            changes["microbatches"] = None
        return replace(self, spec=replace(self.spec, **changes))

    topology = property(lambda self: self.spec.topology, doc="The (faulted) cluster.")
    model = property(lambda self: self.spec.model, doc="What is trained.")
    parallel = property(lambda self: self.spec.parallel, doc="How it is split.")
    training = property(lambda self: self.spec.training, doc="The batch and its settings.")
    gpu = property(lambda self: self.spec.gpu, doc="The GPU the costs are for.")
    costs = property(lambda self: self.spec.costs, doc="The compute cost model.")
    comm = property(lambda self: self.spec.comm, doc="How collectives run.")
    seed = property(lambda self: self.spec.seed, doc="simulation.seed.")
    stragglers = property(lambda self: self.spec.stragglers, doc="GPU -> slowdown factor.")
    source = property(lambda self: self.spec.source, doc="The scenario file, or None.")
    microbatches = property(lambda self: self.spec.microbatches,
                            doc="Micro-batches per pipeline and iteration (checked; None "
                            "after with_run changed the strategy unchecked).")

    @property
    def num_gpus(self) -> int:
        return len(self.topology.gpus)

    @property
    def seq_len(self) -> int:
        """The sequence length trained on (``training.seq_len`` or the model's)."""
        return seq_len_of(self.model, self.training)

    def resolved(self, *, with_assumed: bool = False) -> dict[str, Any]:
        """The full configuration, every default filled in, SI units, in scenario schema;
        but for the defaults a run notes as assumptions (``CommParams.given_dict``, a
        uniform router, kernel rates no table of the GPU's gave), which stay out where the
        scenario did not give them (in with ``with_assumed``; a router has no figure).

        Written back as a scenario file (YAML or JSON) it loads to the same scenario and
        reproduces the same result, notes included.  A fresh, JSON-ready dict.
        """
        compute = resolved_compute(self.gpu, self.roofline, self.cost_table, with_assumed)
        comm = self.comm.to_dict() if with_assumed else self.comm.given_dict()
        fidelity = comm.pop("fidelity")
        comm["base_latency"] = comm.pop("base_latency_s")
        comm["hop_latency"] = comm.pop("hop_latency_s")
        comm["peer_latency"] = comm.pop("peer_latency_s")
        if comm.pop("deepep_sms", None) is not None:  # compute.comm_sms's; keys' own names
            comm["deepep_sm_rate"] = bandwidth_text(comm.pop("deepep_sm_bytes_per_s"))
            comm["deepep_sm_token_time"] = comm.pop("deepep_sm_token_s")
        training = self.training.to_dict()
        training["seq_len"] = self.seq_len
        data: dict[str, Any] = {"name": self.name}
        if self.description:
            data["description"] = self.description
        data.update({
            "cluster": copy.deepcopy(self.topology.config),
            "model": self.model.to_dict(),
            "parallelism": self.parallel.to_dict(),
            "training": training,
            "compute": compute,
            "communication": comm,
            "simulation": {"fidelity": fidelity, "seed": self.seed},
            "stragglers": dict(self.stragglers),
        })
        if self.spec.allow_oom:  # (said only when set: a plain run's file stays as it was)
            data["simulation"]["allow_oom"] = True
        self._resolve_disruptions(data)
        # A bare number is no bandwidth (simcore.units): the file must read back.
        return bandwidths_with_units(data)

    def _resolve_disruptions(self, data: dict[str, Any]) -> None:
        """The faults, stragglers, jobs and goodput keys, where the scenario has them
        (``resolved`` is unchanged else)."""
        if self.straggler_model is not None and self.straggler_model.random:
            data["stragglers"] = self.straggler_model.to_dict()
        if self.faults:
            data["faults"] = [{"target": f.target, "name": f.name, "kind": f.kind,
                               "at_s": f.at_s, "bandwidth_factor": f.bandwidth_factor,
                               "added_latency_s": f.added_latency_s,
                               "subnet_manager_delay_s": f.subnet_manager_delay_s}
                              for f in self.faults]
        if self.jobs:
            for key in ("model", "parallelism", "training", "stragglers"):
                data.pop(key, None)
            data["jobs"] = [{"name": name, "model": job.model.to_dict(),
                             "parallelism": job.parallel.to_dict(),
                             "training": job.training.to_dict(),
                             "placement": list(job.topology.gpus)}
                            for name, job in self.jobs]
        if self.goodput is not None:
            data["goodput"] = self.goodput.to_dict()


# --------------------------------------------------------------------------- errors


class _Locator:
    """Puts the right place on an error: the scenario file and line, the cluster file, or
    ``--set`` for a key an override wrote."""

    __slots__ = ("cluster_lines", "cluster_source", "lines", "overridden", "source")

    def __init__(self, source: str | None, lines: Mapping[str, int],
                 overridden: Iterable[str] = ()) -> None:
        self.source = source
        self.lines = dict(lines)
        self.overridden = tuple(path_key(p) for p in overridden)
        self.cluster_source: str | None = None
        self.cluster_lines: dict[str, int] = {}

    def _is_overridden(self, key: str) -> bool:
        """Whether an override wrote ``key`` (or a mapping holding it), or created ``key``
        on the way to a path below it (a misspelt group: ``--set paralelism.tp=2``)."""
        if any(key == p or key.startswith((p + ".", p + "[")) for p in self.overridden):
            return True
        return key not in self.lines and any(p.startswith((key + ".", key + "["))
                                             for p in self.overridden)

    def locate(self, error: DistsimError, *, cluster: bool = False) -> DistsimError:
        """Fix ``error``'s source/key/line in place (and return it).

        ``cluster``: the error came from building the cluster, whose keys are relative to
        the cluster spec.
        """
        key = error.key or ""
        if cluster:
            full = f"cluster.{key}" if key else "cluster"
            if self._is_overridden(full):
                error.key, error.source, error.line = full, "--set", None
            elif self.cluster_source is not None:
                error.source = self.cluster_source
                if error.line is None:
                    error.line = line_of(key, self.cluster_lines)
            else:
                error.key, error.source = full, self.source
                if error.line is None:
                    error.line = line_of(full, self.lines)
            return error
        if key and self._is_overridden(key):
            error.source, error.line = "--set", None
            return error
        if error.source is None:
            error.source = self.source
        if error.source == self.source and error.line is None and key:
            error.line = line_of(key, self.lines)
        return error


# --------------------------------------------------------------------------- loading


def load_scenario(path: str | os.PathLike[str],
                  overrides: Iterable[tuple[str, Any]] = ()) -> Scenario:
    """Read, override and validate the scenario file ``path``.

    ``overrides`` are ``(dotted_key, value)`` pairs (as :func:`simcore.config.
    parse_assignment` returns them), applied before validation.  Relative cluster and cost
    table paths are taken relative to the scenario file.  Raises :class:`ConfigError` /
    :class:`ParseError` naming the file, the line and the dotted key.
    """
    source = os.fspath(path)
    data, lines = read_yaml(source, "scenario")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"a scenario file holds a mapping, got {type(data).__name__}",
                          source=source, line=1,
                          hint="e.g. 'cluster: {preset: dgx-a100, nodes: 2}' and "
                               "'model: {preset: gpt3-175b}'")
    data.setdefault("name", Path(source).stem)
    return scenario_from_mapping(data, source=source, overrides=overrides,
                                 base_dir=Path(source).parent, _lines=lines)


def scenario_from_mapping(data: Mapping[str, Any], *, source: str | None = None,
                          overrides: Iterable[tuple[str, Any]] = (),
                          base_dir: str | os.PathLike[str] | None = None,
                          _lines: Mapping[str, int] | None = None) -> Scenario:
    """Validate a scenario given as a mapping (what a scenario file holds).

    ``base_dir`` is where relative file paths are looked up (default: the working
    directory); ``source`` names the origin on errors.
    """
    base = Path(base_dir) if base_dir is not None else Path()
    overrides = list(overrides)
    locator = _Locator(source, _lines or {}, (key for key, _ in overrides))
    if not isinstance(data, Mapping):
        raise ConfigError(f"a scenario is a mapping, got {type(data).__name__}", source=source)
    spec: dict[str, Any] = copy.deepcopy(dict(data))
    try:
        # An override of the whole cluster (a preset or file name) comes first; overrides
        # below it apply to what it names.
        for key, value in overrides:
            if key.strip() == "cluster":
                spec["cluster"] = value
        cluster_raw = spec.get("cluster")
        if isinstance(cluster_raw, (str, os.PathLike)) and os.fspath(cluster_raw) not in (
                list_presets()):
            cluster_path = _resolve_file(os.fspath(cluster_raw), base, "cluster", "cluster",
                                         source)
            cluster_data, cluster_lines = read_yaml(cluster_path, "cluster")
            if not isinstance(cluster_data, dict):
                raise ConfigError("a cluster file holds a mapping", source=cluster_path,
                                  hint="e.g. 'preset: dgx-a100' and 'nodes: 2'")
            spec["cluster"] = cluster_data
            locator.cluster_source = cluster_path
            locator.cluster_lines = cluster_lines
        for key, value in overrides:
            if key.strip() != "cluster":
                set_path(spec, key, value, shorthand=_SHORTHAND,
                         dotted_names_under=_DOTTED_NAMES)
        return _validate(spec, source, base, locator)
    except DistsimError as error:
        raise locator.locate(error) from None


def _resolve_file(name: str, base: Path, key: str, what: str, source: str | None) -> str:
    candidate = Path(name).expanduser()
    if not candidate.is_absolute():
        candidate = base / candidate
    if not os.path.isfile(candidate):  # (False for a name the OS refuses, 255+ chars)
        hint = None
        if what == "cluster":
            hint = closest(name, list_presets()) + "; or the path of a cluster YAML file"
        raise ConfigError(f"no {what} file {name!r} (looked for {candidate.absolute()})",
                          key=key,
                          source=source, hint=hint)
    return str(candidate.resolve())


def _validate(spec: dict[str, Any], source: str | None, base: Path,
              locator: _Locator) -> Scenario:
    name, description = _header(spec, source)

    # simulation: checked first, since the seed also draws the fabric's ECMP hashes
    simulation = check_mapping(spec.get("simulation"), key="simulation", source=source,
                               optional=True)
    check_keys(simulation, SIMULATION_KEYS, prefix="simulation", source=source)
    seed = check_whole(simulation.get("seed", 0), key="simulation.seed", minimum=0,
                       source=source)
    allow_oom = check_bool(simulation.get("allow_oom", False), key="simulation.allow_oom",
                           source=source)

    topology = _cluster_topology(spec["cluster"], seed, source, locator)
    if "jobs" in spec:
        return _jobs_scenario(spec, topology, source, base, locator)
    faults = faults_from_list(spec.get("faults"), topology, source=source)
    topology = apply_faults(topology, faults)

    # model
    model_raw = spec["model"]
    if isinstance(model_raw, str):
        model_raw = {"preset": model_raw}
    model = model_from_mapping(model_raw, source=source, prefix="model")

    parallel = parallel_from_mapping(spec.get("parallelism"), source=source,
                                     prefix="parallelism")
    training = training_from_mapping(spec.get("training"), source=source, prefix="training")

    # compute
    compute = check_mapping(spec.get("compute"), key="compute", source=source, optional=True)
    check_keys(compute, COMPUTE_KEYS, prefix="compute", source=source, synonyms=COMPUTE_NAMES)
    gpu = gpu_of(compute.get("gpu"), topology, source)
    roofline = roofline_of(compute, gpu, training.precision, source, training.fp8_recipe,
                           training.optimizer_moments)
    parallel = _stack_defaults(parallel, spec.get("parallelism"), roofline, training)
    costs, cost_table = _cost_model(compute.get("costs", "roofline"), gpu, roofline, base,
                                    source)

    # communication and simulation
    comm = _communication(spec.get("communication"), simulation, gpu, source)
    stragglers, straggler_model = _straggler_factors(spec.get("stragglers"), topology, seed,
                                                     source)
    microbatches = check_strategy(model, parallel, training, num_gpus=len(topology.gpus),
                                  source=source, seq_len=training.seq_len or model.seq_len)
    comm = _routed_comm(comm, model, parallel, training, roofline, source)
    run = IterationSpec(topology=topology, model=model, parallel=parallel,
                        training=training, costs=costs, gpu=gpu, comm=comm, seed=seed,
                        stragglers=stragglers, source=source, microbatches=microbatches,
                        allow_oom=allow_oom)
    return Scenario(name=name.strip(), spec=run, roofline=roofline, description=description,
                    cost_table=cost_table, _locator=locator, faults=faults,
                    straggler_model=straggler_model,
                    goodput=goodput_from_mapping(spec.get("goodput"), source=source))


def _header(spec: dict[str, Any], source: str | None) -> tuple[str, str]:
    """The spec's keys and required sections checked; its ``name`` and ``description``."""
    check_keys(spec, SCENARIO_KEYS, source=source)
    for required in _REQUIRED:
        if spec.get(required) is None and not (required == "model" and "jobs" in spec):
            raise ConfigError(f"a scenario needs '{required}'", key=required, source=source,
                              hint="e.g. cluster: {preset: dgx-a100, nodes: 2}"
                              if required == "cluster" else "e.g. model: {preset: gpt3-175b}")
    name = spec.get("name", "scenario")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"must be a non-empty string, got {name!r}", key="name",
                          source=source)
    description = spec.get("description", "") or ""
    if not isinstance(description, str):
        raise ConfigError("must be a string", key="description", source=source)
    return name, description


def _cluster_topology(cluster: Any, seed: int, source: str | None,
                      locator: _Locator) -> Topology:
    """The ``cluster`` section (a mapping, a preset, a file or a job's view) built."""
    if isinstance(cluster, Topology):  # a job's view of a shared cluster (``jobs``)
        cluster = {"view": cluster}
    if isinstance(cluster, str):
        cluster = {"preset": cluster}
    if not isinstance(cluster, Mapping):
        raise ConfigError(f"must be a cluster mapping, a preset or a file, got {cluster!r}",
                          key="cluster", source=source)
    try:
        return (cluster["view"] if "view" in cluster
                else _seed_hashing(build_cluster(cluster), seed))
    except DistsimError as error:
        raise locator.locate(error, cluster=True) from None


def _cost_model(costs_raw: Any, gpu: GpuSpec, roofline: RooflineCosts, base: Path,
                source: str | None) -> tuple[CostModel, str | None]:
    """``compute.costs``: the roofline, or a cost table over it; the table's path."""
    if not isinstance(costs_raw, str) or not costs_raw.strip():
        raise ConfigError(f"must be 'roofline' or the path of a cost table, got {costs_raw!r}",
                          key="compute.costs", source=source)
    if costs_raw == "roofline":
        return roofline, None
    cost_table = _resolve_file(costs_raw, base, "compute.costs", "cost table", source)
    return TableCosts.from_file(cost_table, gpu=gpu.name, fallback=roofline), cost_table


def _communication(raw: Any, simulation: Mapping[str, Any], gpu: GpuSpec,
                   source: str | None) -> CommParams:
    """The ``communication`` section, with ``simulation.fidelity`` carried into it."""
    communication = dict(check_mapping(raw, key="communication", source=source,
                                       optional=True))
    if "fidelity" in communication:
        raise ConfigError("fidelity is a simulation setting", key="communication.fidelity",
                          source=source, hint="write it as simulation.fidelity")
    if "fidelity" in simulation:
        communication["fidelity"] = simulation["fidelity"]
    try:
        return comm_params_from_mapping(communication, source=source, prefix="communication",
                                        architecture=gpu.architecture)
    except ConfigError as error:
        if error.key == "communication.fidelity":
            error.key = "simulation.fidelity"
        raise


def _routed_comm(comm: CommParams, model: ModelSpec, parallel: ParallelConfig,
                 training: TrainingConfig, roofline: RooflineCosts,
                 source: str | None) -> CommParams:
    """``model.moe``'s explicit placement checked against ``ep``, and its skew carried
    into the expert all-to-alls (workloads.specs.moe_routing); DeepEP's kernels on the
    SMs ``compute.comm_sms`` holds, with the tokens a rank routes and their width
    (collectives.deepep)."""
    if comm.all_to_all == "deepep":
        local = rank_training(model, parallel, training)  # a CP rank's share of a sequence
        tokens = local.micro_batch * seq_len_of(model, local) // (
            parallel.tp if parallel.sequence_parallel else 1)  # as alltoall_bytes counts
        if parallel.moe_overlap:  # every exchange carries half a micro-batch's tokens
            tokens //= 2
        comm = replace(comm, deepep_sms=roofline.comm_sms, moe_tokens=tokens,
                       moe_hidden=model.hidden)
    return routed_comm(comm, model, parallel.ep, source)


def _jobs_scenario(spec: dict[str, Any], topology: Topology, source: str | None, base: Path,
                   locator: _Locator) -> Scenario:
    """A ``jobs:`` scenario: each job a scenario on its view of the (faulted) cluster; the
    scenario itself is the first job's, holding them all (scenarios.disruptions)."""
    for key in ("model", "parallelism", "training", "stragglers"):
        if key in spec:
            raise ConfigError(f"with 'jobs', '{key}' belongs to each job" if key != "stragglers"
                              else "stragglers are not modelled with 'jobs' yet", key=key,
                              source=source, hint="move it into the jobs' entries"
                              if key != "stragglers" else "run each job on its own")
    faults = faults_from_list(spec.get("faults"), topology, source=source)
    topology = apply_faults(topology, faults)

    def validate(mapping: dict[str, Any], prefix: str) -> Scenario:
        try:
            return _validate(mapping, source, base, locator)
        except DistsimError as error:
            error.key = f"{prefix}.{error.key}" if error.key else prefix
            raise

    jobs = jobs_from_list(spec["jobs"], spec, topology, validate, source=source)
    first = jobs[0][1]
    return replace(first, name=str(spec.get("name", "scenario")).strip(), jobs=jobs,
                   faults=faults, goodput=goodput_from_mapping(spec.get("goodput"),
                                                               source=source),
                   spec=replace(first.spec, source=source), _locator=locator)


def _stack_defaults(parallel: ParallelConfig, raw: Any, roofline: RooflineCosts,
                    training: TrainingConfig) -> ParallelConfig:
    """The software stack's defaults for the gradient reduction the scenario left unsaid:
    its precision, its buckets (workloads.cost.compute.stacks), and its overlaps of the
    parameter gather and of tensor-parallel communication, where the strategy has them."""
    given = raw if isinstance(raw, Mapping) else {}
    stack = roofline.stack
    changes: dict[str, Any] = {}
    if "grad_reduce_precision" not in given:
        changes["grad_reduce_precision"] = stack.grad_reduce_precision(training.precision)
    # The stack's buckets, and overlaps where the strategy has them (docs/overlaps.md).
    overlaps = stack_overlap_defaults(parallel, roofline)
    changes.update({key: on for key, on in overlaps.items() if key not in given})
    return dataclasses.replace(parallel, **changes) if changes else parallel


def stack_overlap_defaults(parallel: ParallelConfig, roofline: RooflineCosts) -> dict[str, Any]:
    """The ``parallelism`` keys left to the stack: its buckets and their dispatch
    (:meth:`~workloads.cost.compute.stacks.Stack.ddp_defaults`), its overlaps where
    ``parallel`` has what they overlap (a search re-applies this to each candidate); no TP
    overlap beside forward-backward pairs (:func:`~scenarios.run_notes.tp_overlap_notes`)."""
    stack = roofline.stack
    dp_overlaps = not (stack.dp_overlaps_need_dp and parallel.dp < 2)
    return {**stack.ddp_defaults(parallel.dp, parallel.schedule),
            "overlap_param_gather": (stack.overlap_param_gather and dp_overlaps
                                     and parallel.zero in (1, 2)),
            "tp_comm_overlap": (stack.tp_comm_overlap and parallel.sequence_parallel
                                and parallel.tp > 1 and parallel.tp_mode == "1d"
                                and not parallel.layer_groups and not parallel.fb_overlap)}


def _seed_hashing(topology: Topology, seed: int) -> Topology:
    """``topology`` (just built, no route taken yet) with ECMP's hashes drawn again for a
    non-zero ``simulation.seed`` (already checked): the seed is mixed into
    ``fabric.hash_seed``, as another switch hash seed would be, so seed 0 keeps the fabric's
    own routes.  Static and adaptive routing hash nothing."""
    if seed <= 0 or topology.routing.policy != "ecmp":
        return topology
    digest = hashlib.blake2b(f"{topology.routing.hash_seed}|{seed}".encode(), digest_size=8)
    topology.routing = replace(topology.routing,
                               hash_seed=int.from_bytes(digest.digest(), "little") >> 1)
    return topology


def _straggler_factors(raw: Any, topology: Topology, seed: int, source: str | None,
                       ) -> tuple[dict[str, float], StragglerModel | None]:
    """Per-GPU factors as written, or drawn from ``seed`` when ``stragglers`` holds
    ``jitter`` or ``slow_nodes`` (workloads.job.stragglers); the model they came from."""
    mapping = check_mapping(raw, key="stragglers", source=source, optional=True)
    if not any(str(key).partition(".")[0] in STRAGGLER_KEYS for key in mapping):
        return _stragglers(raw, topology, source), None

    def unknown(name: str, key: str) -> None:
        _stragglers({name: 1.0}, topology, source)  # raises naming the closest GPU

    model = straggler_model_from_mapping(mapping, topology.gpus, source=source,
                                         check_gpu=unknown)
    return model.draw(topology.gpus, topology.node_of, seed), model


def _stragglers(raw: Any, topology: Topology, source: str | None) -> dict[str, float]:
    mapping = check_mapping(raw, key="stragglers", source=source, optional=True)
    gpus = set(topology.gpus)
    result: dict[str, float] = {}
    for gpu, factor in mapping.items():
        key = f"stragglers.{gpu}"
        if gpu not in gpus:
            near = difflib.get_close_matches(str(gpu), topology.gpus, n=1)
            shown = ", ".join(topology.gpus[:4]) + (", …" if len(gpus) > 4 else "")
            raise ConfigError(f"no GPU {gpu!r} in the cluster", key=key, source=source,
                              hint=f"did you mean {near[0]!r}? GPUs: {shown}" if near
                              else f"GPUs: {shown}")
        result[str(gpu)] = check_number(factor, key=key, above=True, source=source,
                                        maximum=MAX_STRAGGLER_FACTOR,
                                        hint=f"a slowdown factor up to "
                                        f"{MAX_STRAGGLER_FACTOR:g}, e.g. 1.2: compute 20 % "
                                        "slower; a GPU that stopped is a fault")
    return result


# --------------------------------------------------------------------------- running


def run_scenario(scenario: Scenario, *, trace: bool = False, allow_oom: bool = False) -> Report:
    """Simulate one iteration of ``scenario`` and report it.

    ``trace`` records spans and link counters (``Report.tracer``) for a Chrome trace and
    plots; ``allow_oom`` simulates a configuration that does not fit in GPU memory instead
    of raising :class:`ConfigError`.  ``Report.wall_time_s`` is the host time the
    simulation took.
    """
    spec = spec_of(scenario, trace=trace, allow_oom=allow_oom)
    started = time.perf_counter()
    try:
        result = simulate(scenario, spec)
    except DistsimError as error:
        # Name the scenario file (and the line of the key) on errors from the run.
        if scenario._locator is not None:
            scenario._locator.locate(error)
        elif error.source is None:
            error.source = scenario.source
        raise
    wall_time_s = time.perf_counter() - started
    setup = RunSetup(model=scenario.model, parallel=scenario.parallel,
                     training=scenario.training, gpu=scenario.gpu, config=scenario.resolved(),
                     jobs=max(len(scenario.jobs), 1),
                     job_runs=tuple(JobRun(name, job.model, job.parallel, job.training)
                                    for name, job in scenario.jobs),
                     cluster_gpus=scenario.topology.cluster_gpu_count)
    report = build_report(name=scenario.name, source=scenario.source, result=result,
                          setup=setup, wall_time_s=wall_time_s)
    runs = [scenario, *(job for _, job in scenario.jobs)]
    return replace(report, notes=run_notes(runs, scenario.faults, scenario.topology,
                                           report.iteration_time_s,
                                           alltoall_algorithms=result.alltoall_algorithms))
