"""Shared fixtures: where things are, the real measurements, small scenarios and clusters.

Every helper more than one test module needs lives here as a fixture, so test modules never
import each other.  Fixtures that stand for a helper function (``tiny``, ``write_scenario``)
return the function itself: a test names it as a parameter and calls it as before.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from distsim_gpu.collectives import CommParams
from distsim_gpu.topology import Topology, build_cluster
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.gpus import GpuSpec, get_gpu
from distsim_gpu.workloads.specs.models import ModelSpec, model_from_mapping
from hypothesis import settings

if TYPE_CHECKING:
    from distsim_gpu.workloads.iteration.simulator import IterationResult

REPO_ROOT = Path(__file__).resolve().parents[1]

# Property tests draw the same examples on every run ("derandomize"): the suite's verdict
# must not depend on the day, and a CI failure must reproduce on a laptop.  Random search
# for new counterexamples is a deliberate act: ``pytest --hypothesis-profile=explore``.
settings.register_profile("reproducible", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile("reproducible")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Rewriting the docs (``DISTSIM_REGENERATE_DOCS``) or the golden summaries
    (``DISTSIM_REGENERATE_GOLDEN``) runs in one process: two pytest-xdist workers
    rewriting tables of the same page would each write back the page as they read it,
    and one's tables would be lost."""
    regenerating = (os.environ.get("DISTSIM_REGENERATE_DOCS")
                    or os.environ.get("DISTSIM_REGENERATE_GOLDEN"))
    if regenerating and getattr(config.option, "numprocesses", None):
        config.option.numprocesses = 0
        config.option.dist = "no"

# ---------------------------------------------------------------------- places


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's top folder (pyproject.toml, the packages, tests/)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    """The shipped example scenarios."""
    return REPO_ROOT / "scenarios" / "examples"


# ---------------------------------------------------------------------- real measurements


def load_script(relative: str, name: str) -> ModuleType:
    """The script at ``relative`` (to the repository) imported as module ``name``,
    registered in ``sys.modules`` (dataclasses look their module up while the class is
    built), with its own folder on the path while it loads (a script imports its
    siblings as scripts do)."""
    path = REPO_ROOT / relative
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def _shared_data_dir(part: str) -> Path | None:
    """``shared/data`` beside the repo, else ``$DISTSIM_SHARED_DATA``; the first with ``part``."""
    candidates = [REPO_ROOT.parent / "shared" / "data"]
    if os.environ.get("DISTSIM_SHARED_DATA"):
        candidates.append(Path(os.environ["DISTSIM_SHARED_DATA"]))
    for candidate in candidates:
        if (candidate / part).is_dir():
            return candidate
    return None


_ABSENT = "shared/data/{} is not present (set DISTSIM_SHARED_DATA to point at shared/data)"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real-measurement corpus; the test is skipped where it is absent."""
    data = _shared_data_dir("nccl")
    if data is None:
        pytest.skip(_ABSENT.format("nccl"))
    return data


@pytest.fixture(scope="session")
def nccl_logs(shared_data: Path) -> Path:
    """The folder of real nccl-tests logs (``shared/data/nccl``)."""
    return shared_data / "nccl"


@dataclass(frozen=True, slots=True)
class TraceCorpus:
    """The real profiler traces of ``shared/data/traces``, as SOURCES.txt there lists them."""

    root: Path

    @property
    def hta(self) -> Path:
        """HolisticTraceAnalysis's test traces (one folder per case)."""
        return self.root / "HolisticTraceAnalysis" / "tests" / "data"

    @property
    def dlrm(self) -> Path:
        """PARAM's 8-rank DLRM Kineto trace (a tar.gz of one JSON per rank)."""
        return self.root / "param" / "et_replay" / "tests" / "inputs" / "dlrm_kineto.tar.gz"


@pytest.fixture(scope="session")
def trace_corpus() -> TraceCorpus:
    """The profiler-trace corpus; the test is skipped where it is absent."""
    data = _shared_data_dir("traces")
    if data is None:
        pytest.skip(_ABSENT.format("traces"))
    return TraceCorpus(data / "traces")


@pytest.fixture(scope="session")
def chakra_samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Chakra sample traces of ``shared/data/chakra``, unpacked once (``chakra.0.et``,
    ``chakra.0.json``, ``small_chakra.0.json`` somewhere below); skipped where absent."""
    data = _shared_data_dir("chakra")
    if data is None:
        pytest.skip(_ABSENT.format("chakra"))
    folder = tmp_path_factory.mktemp("chakra")
    for name in ("feeder_tests_trace.tar.gz", "json_trace.tar.gz"):
        with tarfile.open(data / "chakra" / name) as archive:
            archive.extractall(folder, filter="data")
    return folder


# ---------------------------------------------------------------------- small scenarios

#: A 4-layer GPT-style model on 8 GPUs of the ideal ``switch`` preset, split tp 2 × pp 2 ×
#: dp 2: every part of an iteration (TP collectives, pipeline sends, DP all-reduce) in
#: about a tenth of a second.
TINY: dict[str, Any] = {
    "name": "tiny",
    "cluster": {"preset": "switch", "gpus": 8},
    "model": {"name": "tiny-gpt", "layers": 4, "hidden": 256, "heads": 8, "seq_len": 128,
              "vocab": 1024},
    "parallelism": {"tp": 2, "pp": 2, "dp": 2, "schedule": "1f1b"},
    "training": {"micro_batch": 1, "global_batch": 8, "recompute": "none",
                 "precision": "bf16"},
    "compute": {"gpu": "a100-80gb", "costs": "roofline"},
    "simulation": {"fidelity": "coflow", "seed": 0},
}


def _tiny(**changes: Any) -> dict[str, Any]:
    """A deep copy of TINY with top-level sections replaced or (for dicts) updated."""
    data = copy.deepcopy(TINY)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    return data


def _write_scenario(path: Path, data: dict[str, Any] | str) -> Path:
    """Write a scenario (a mapping, or YAML text as is) to ``path``; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny() -> Callable[..., dict[str, Any]]:
    """``tiny(**changes)``: the tiny scenario as a fresh mapping, sections changed."""
    return _tiny


@pytest.fixture(scope="session")
def write_scenario() -> Callable[[Path, dict[str, Any] | str], Path]:
    """``write_scenario(path, data)``: a mapping (or YAML text) written as a scenario file."""
    return _write_scenario


# ---------------------------------------------------------------------- iterations


@dataclass(frozen=True, slots=True)
class UniformCosts:
    """Every layer takes ``fwd_s`` forward and ``bwd_s`` backward; nothing else costs time."""

    fwd_s: float
    bwd_s: float

    def layer_time_s(self, pass_: str, model: ModelSpec, _shard: LayerShard) -> float:
        return self.bwd_s if pass_ == "bwd" else self.fwd_s

    def embedding_time_s(self, pass_: str, model: ModelSpec, **_shard: Any) -> float:
        return 0.0

    def loss_time_s(self, pass_: str, model: ModelSpec, **_shard: Any) -> float:
        return 0.0

    def optimizer_step_time_s(self, params_on_gpu: float) -> float:
        return 0.0


@dataclass(frozen=True, slots=True)
class UniformIterations:
    """Iterations whose closed forms are easy: uniform layer costs, ideal communication.

    Transfers over :meth:`fast_switch` take ~1e-10 s at most (the tied-embedding
    gradients), so a relative tolerance of 1e-6 on millisecond compute leaves them out.
    """

    model: ModelSpec
    gpu: GpuSpec
    t_fwd_s: float = 1e-3
    t_bwd_s: float = 2e-3

    @property
    def costs(self) -> UniformCosts:
        """The uniform layer costs these iterations run with."""
        return UniformCosts(self.t_fwd_s, self.t_bwd_s)

    @staticmethod
    def fast_switch(gpus: int) -> Topology:
        """Links so fast and latency-free that point-to-point transfers take ~no time."""
        return build_cluster({"preset": "switch", "gpus": gpus, "link_bandwidth": 1e18,
                              "link_latency": 0})

    def run(self, topology: Topology, parallel: Any, training: Any, *,
            model: ModelSpec | None = None, costs: Any = None, **extra: Any
            ) -> IterationResult:
        """One simulated iteration; ``comm`` defaults to ideal simple-protocol collectives."""
        # Imported here so that a broken iteration module fails its own tests, not collection.
        from distsim_gpu.workloads.iteration.simulator import IterationSpec, simulate_iteration

        comm = extra.pop("comm", CommParams(protocol="simple").ideal())
        spec = IterationSpec(topology, model or self.model, parallel, training,
                             costs or UniformCosts(self.t_fwd_s, self.t_bwd_s), self.gpu,
                             comm=comm, **extra)
        return simulate_iteration(spec)


@pytest.fixture(scope="session")
def uniform() -> UniformIterations:
    """An 8-layer, 1024-wide model on A100s whose layers cost 1 ms forward, 2 ms backward."""
    small = model_from_mapping({"name": "small", "layers": 8, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 32000})
    return UniformIterations(small, get_gpu("a100-80gb"))


# ---------------------------------------------------------------------- clusters


@pytest.fixture(scope="session")
def small_cluster() -> Topology:
    """Two DGX-A100 nodes on one switch: 16 GPUs, 8 rails."""
    return build_cluster({"preset": "dgx-a100", "nodes": 2, "fabric": "single-switch"})
