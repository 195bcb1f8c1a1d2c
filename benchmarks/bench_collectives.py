"""Benchmark: all-reduce sweeps on growing clusters, and the flow solver under load.

Run from the repository root:

    python benchmarks/bench_collectives.py            # everything (several minutes)
    python benchmarks/bench_collectives.py --quick    # 8 and 64 GPUs only

Prints a Markdown table: wall time (s), simulated events, events per second.  Figures
go into benchmarks/README.md with the machine they were measured on.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.collectives.nccl_tests import size_series
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.maxmin import solve_max_min
from distsim_gpu.topology import build_cluster

SIZES = size_series(8, 8 * 2**30, 2)  # 8 B – 8 GiB, ×2: 31 sizes


def cluster(gpus: int):
    return build_cluster({"preset": "dgx-h100", "nodes": max(gpus // 8, 1),
                          "fabric": "rail-optimized"})


def bench_sweep(gpus: int, fidelity: str, sizes: list[int]) -> dict[str, float]:
    start = time.perf_counter()
    topo = cluster(gpus)
    built = time.perf_counter()
    # run_benchmark builds its own Simulation; count events on one built here instead.
    sim = Simulation()
    comm = Communicator(sim, topo, CommParams(fidelity=fidelity))
    for size in sizes:
        process = comm.collective("all_reduce", list(topo.gpus), size)
        sim.run(until=process)
    done = time.perf_counter()
    events = sim.env.events_processed
    return {"build_s": built - start, "sweep_s": done - built, "events": events,
            "flows": sim.network.completed_flows}


def bench_solver(num_flows: int, gpus: int, seed: int = 0, window_s: float = 0.0,
                 check_every: int = 0) -> dict[str, float]:
    """Random point-to-point sends of 1-100 MB between random GPU pairs on a two-tier
    fat-tree with 2:1 oversubscription, issued at time 0 (``window_s`` 0) or at uniform
    random times in ``[0, window_s]``.  Wall and CPU time from the first send on.

    ``check_every`` N > 0: after every Nth solve, every transferring flow's rate is
    compared with a full progressive-filling solve of all of them (:func:`solve_max_min`);
    ``worst_rel_diff`` is the largest relative difference seen (the times then include
    the checks)."""
    topo = build_cluster({"preset": "dgx-h100", "nodes": gpus // 8,
                          "fabric": {"kind": "fat-tree", "oversubscription": 2}})
    rng = np.random.default_rng(seed)
    sim = Simulation(seed)
    comm = Communicator(sim, topo, CommParams(protocol="simple"))
    pairs = rng.integers(0, len(topo.gpus), size=(num_flows, 2))
    sizes = rng.uniform(1e6, 1e8, size=num_flows)
    delays = rng.uniform(0.0, window_s, size=num_flows) if window_s else None
    worst = [0.0]
    if check_every:
        sim.network.add_listener(lambda *_: _check_rates(sim.network, check_every, worst))
    start, cpu = time.perf_counter(), time.process_time()
    for i, ((a, b), size) in enumerate(zip(pairs, sizes)):
        if a == b:
            b = (b + 1) % len(topo.gpus)
        if delays is None:
            comm.send(topo.gpus[a], topo.gpus[b], float(size))
        else:
            sim.env.process(_send_later(sim, comm, float(delays[i]), topo.gpus[a],
                                        topo.gpus[b], float(size)))
    sim.run()
    done = time.perf_counter()
    result = {"wall_s": done - start, "cpu_s": time.process_time() - cpu,
              "events": sim.env.events_processed, "solves": sim.network.solves}
    if check_every:
        result["worst_rel_diff"] = worst[0]
    return result


def _check_rates(network, every: int, worst: list[float]) -> None:
    """Compare the transferring flows' rates with a solve from scratch (every Nth solve)."""
    flows = list(network._transferring)
    if network.solves % every or not flows:
        return
    counts = np.array([len(flow.links) for flow in flows])
    want = solve_max_min(np.repeat(np.arange(len(flows)), counts),
                         np.concatenate([flow._link_array for flow in flows]),
                         np.concatenate([flow._mult_array for flow in flows]),
                         network._capacity_array, len(flows))
    got = np.array([flow.rate_bytes_per_s for flow in flows])
    worst[0] = max(worst[0], float(np.max(np.abs(got - want) / want)))


def _send_later(sim: Simulation, comm: Communicator, delay_s: float, src: str, dst: str,
                size_bytes: float):
    yield sim.env.timeout(delay_s)
    yield comm.send(src, dst, size_bytes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 and 64 GPUs only")
    parser.add_argument("--step-sizes", type=int, default=len(SIZES),
                        help="largest sizes simulated at step fidelity on 512+ GPUs")
    parser.add_argument("--solver-flows", type=int, nargs="+",
                        default=[1_000, 2_000, 4_000, 10_000],
                        help="concurrent-flow counts for the solver case on a 1024-GPU "
                        "fat-tree")
    parser.add_argument("--solver-window", type=float, default=0.0,
                        help="start the solver case's sends at random times in "
                        "[0, WINDOW] seconds instead of all at 0")
    parser.add_argument("--solver-check", type=int, default=0, metavar="N",
                        help="after every Nth solve, compare all rates with a full "
                        "progressive-filling solve; prints the worst relative difference")
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print("| GPUs | fidelity | sizes | build (s) | sweep (s) | events | events/s | flows |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    scales = (8, 64) if args.quick else (8, 64, 512, 1024)
    for gpus in scales:
        for fidelity in ("coflow", "step"):
            sizes = SIZES
            if fidelity == "step" and gpus >= 512:
                sizes = SIZES[-args.step_sizes:]
            r = bench_sweep(gpus, fidelity, sizes)
            print(f"| {gpus} | {fidelity} | {len(sizes)} | {r['build_s']:.2f} | "
                  f"{r['sweep_s']:.2f} | {r['events']} | {r['events'] / r['sweep_s']:,.0f} | "
                  f"{r['flows']} |", flush=True)
    print()
    check = (" worst rel. diff |", "---:|") if args.solver_check else ("", "")
    print("| concurrent flows | GPUs (fat-tree 2:1) | window (s) | wall (s) | CPU (s) | "
          f"events | solves |{check[0]}")
    print(f"|---:|---:|---:|---:|---:|---:|---:|{check[1]}")
    for flows in args.solver_flows:
        gpus = 256 if args.quick else 1024
        if args.quick and flows > 1_000:
            continue
        r = bench_solver(flows, gpus, window_s=args.solver_window,
                         check_every=args.solver_check)
        diff = f" {r['worst_rel_diff']:.1e} |" if args.solver_check else ""
        print(f"| {flows} | {gpus} | {args.solver_window:g} | {r['wall_s']:.2f} | "
              f"{r['cpu_s']:.2f} | {r['events']} | {r['solves']} |{diff}", flush=True)


if __name__ == "__main__":
    main()
