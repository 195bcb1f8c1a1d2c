"""The NVLink domain as a what-if: sweeping it from 8 to 72 GPUs changes only what it
should.  A job whose GPUs already share one NVLink domain does not move; tensor parallelism
that crosses domains at 8 (and straddles two at 16) and fits inside one at 24 and more gets
faster, and no faster once inside (each GPU's NVLink bandwidth is the same at any size)."""

from __future__ import annotations

import re

import pytest
import yaml
from distsim_gpu.scenarios.cli.main import main

SMALL = {"name": "small", "layers": 4, "hidden": 4096, "heads": 32, "seq_len": 2048,
         "vocab": 32000}
TRAINING = {"micro_batch": 1, "global_batch": 4, "recompute": "none", "precision": "bf16"}


def _scenario(domain: int) -> dict:
    """144 GB200 GPUs in domains of ``domain``; an 8-GPU tp-8 job and a 16-GPU tp-16 job."""
    return {
        "name": f"domain-{domain}",
        "cluster": {"preset": "gb200-nvl72", "nvlink_domain": domain, "nodes": 144 // domain,
                    "fabric": "rail-optimized"},
        "compute": {"gpu": "gb200", "costs": "roofline"},
        "simulation": {"fidelity": "coflow", "seed": 0},
        "jobs": [{"name": name, "model": SMALL, "parallelism": {"tp": tp, "dp": 1},
                  "training": TRAINING, "placement": "packed"}
                 for name, tp in (("in-one-node", 8), ("tp16", 16))]}


def _job_times_ms(tmp_path, capsys, domain: int) -> dict[str, float]:
    path = tmp_path / f"domain-{domain}.yaml"
    path.write_text(yaml.safe_dump(_scenario(domain)))
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    # PXN relays only through the job's own GPUs: the jobs never share a link
    assert "links carrying several jobs: 0" in out
    found = re.findall(r"^  (\S+): \d+ GPUs, ([\d.]+) ms -> ([\d.]+) ms", out, re.MULTILINE)
    return {name: float(alone) for name, alone, _shared in found}


def test_a_domain_sweep_moves_only_tensor_parallelism_that_crosses_it(tmp_path, capsys):
    times = {d: _job_times_ms(tmp_path, capsys, d) for d in (8, 16, 24, 36, 72)}
    one_node = {d: t["in-one-node"] for d, t in times.items()}
    assert len(set(one_node.values())) == 1  # to the printed digit, at every domain size
    tp16 = {d: t["tp16"] for d, t in times.items()}
    assert tp16[8] > 1.3 * tp16[24]  # its all-reduces leave the NICs for NVLink
    assert tp16[16] > 1.3 * tp16[24]  # at 16 it straddles two domains, on other rails
    assert tp16[24] == tp16[36] == tp16[72]
    assert tp16[72] == pytest.approx(10.6, abs=0.01)  # 10.19 at Hopper's NVLS fraction
