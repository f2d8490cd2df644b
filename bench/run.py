"""Bench: the speed figures of issue 6, each a ratio or fraction measured in this one run.

Prints its figures, then one JSON object as the last line. The machine's peak is measured
first (a large float32 matmul) and every step throughput is also given as a fraction of it.
End-to-end K = 100 × T = 1000 times are measured on fewer runs/steps and projected
linearly when ``--full`` is not given (the JSON says which).

    python bench/run.py            # about 5 minutes on a 2-core CPU
    python bench/run.py --full     # the K = 100 × T = 1000 fits for real (long on a CPU)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time

import jax
import jax.numpy as jnp
import numpy as np

from microdata.dataset import Dataset
from microdata.domain import Domain
from microdata.marginals import Workload, answer
from reconstruct.queries import MarginalPlan, plan_for
from reconstruct.rap import RAPSettings, default_batch, rap_rank

# An ACS-coverage-like domain: 17 attributes, one-hot width 107.
SIZES = (10, 24, 5, 2, 9, 5, 4, 5, 4, 2, 2, 3, 2, 9, 2, 17, 2)


def peak_gflops(n: int = 2048, reps: int = 10) -> float:
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    t = time.perf_counter()
    for _ in range(reps):
        f(a).block_until_ready()
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e9


def data(sizes, n, seed=0) -> Dataset:
    dom = Domain.from_sizes({f"X{i}": s for i, s in enumerate(sizes)})
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 8, n)
    cols = [(z * (i + 3) + rng.integers(0, max(2, s // 3), n)) % s for i, s in enumerate(sizes)]
    return Dataset(dom, np.stack(cols, axis=1))


def step_flops(plan: MarginalPlan, rows: int) -> float:
    """Forward multiply-adds of one relaxed-answer evaluation ×2 (FLOPs) ×3 (with the backward pass)."""
    total = 0
    for g in plan.groups:
        left = int(np.prod([plan.sizes[i] for i in g.prefix])) if g.prefix else 1
        right = sum(plan.sizes[i] for i in g.lasts)
        total += rows * left * right
    return 2.0 * total * 3


def timed_runs(plan, targets, dom, runs, steps, rows, sampling="dense", batch=None):
    """Seconds for ``runs`` fits of ``steps`` steps, after compiling on one batch of one block."""
    block = min(steps, 100)
    s = RAPSettings(rows=rows, steps=steps, sampling=sampling, batch=batch, steps_per_call=block)
    warm = dataclasses.replace(s, steps=block)
    rap_rank(plan, targets, dom, jax.random.key(0), default_batch(s, runs), warm)  # compile
    t = time.perf_counter()
    rap_rank(plan, targets, dom, jax.random.key(1), runs, s)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--rows", type=int, default=1000)
    args = ap.parse_args()
    out: dict = {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()]}
    peak = peak_gflops()
    out["peak_gflops"] = round(peak, 1)
    print(f"float32 matmul peak: {peak:.1f} GFLOP/s")

    d = data(SIZES, 20_000)
    for k in (2, 3):
        w = Workload.all_kway(d.domain, k)
        plan = MarginalPlan.build(w)
        t = answer(d, w)
        steps = 50 if k == 2 else 10
        sec = timed_runs(plan, t, d.domain, 1, steps, args.rows, batch=1)
        sps = steps / sec
        frac = step_flops(plan, args.rows) * sps / (peak * 1e9)
        err = timed_runs(plan, t, d.domain, 1, steps, args.rows, sampling="error", batch=1)
        out[f"step_{k}way_per_s"] = round(sps, 2)
        out[f"step_{k}way_frac_peak"] = round(frac, 3)
        out[f"step_{k}way_error_sampled_per_s"] = round(steps / err, 2)
        print(f"{k}-way: {len(w.marginals)} marginals, {w.num_queries} queries; dense {sps:.1f} steps/s "
              f"({frac:.1%} of peak); error-sampled {steps / err:.1f} steps/s")
        K, T = (100, 1000) if args.full else ((8, 1000) if k == 2 else (4, 100))
        sec = timed_runs(plan, t, d.domain, K, T, args.rows)
        projected = sec * (100 / K) * (1000 / T)
        out[f"rap_rank_{k}way_s"] = round(projected, 1)
        out[f"rap_rank_{k}way_measured"] = f"K={K}, T={T}" + ("" if args.full else ", projected to K=100, T=1000")
        print(f"RAP-Rank {k}-way K=100 x T=1000: {projected:.0f} s (measured K={K}, T={T})")
        if k == 3:
            out["rap_rank_3way_peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)

    big = data(SIZES, 1_000_000)
    w2 = Workload.all_kway(big.domain, 2)
    answer(big, w2)
    t0 = time.perf_counter()
    answer(big, w2)
    rate = len(big) * len(w2.marginals) / (time.perf_counter() - t0)
    out["answers_row_marginals_per_s"] = round(rate / 1e6, 1) * 1e6
    print(f"exact answers: {rate / 1e6:.0f} M row-marginals/s (N = 10^6, {len(w2.marginals)} marginals)")

    from microdata.population import embedded_population

    pop = embedded_population(0)
    tracts = pop.geography.unit_ids("tract")[:8]
    sub = ["AGE", "SEX", "HISP", "RACE"]
    wk = Workload.all_kway(pop.project(sub).domain, 2)
    plan = plan_for(wk)
    s = RAPSettings(rows=300, steps=100)
    rap_rank(plan, answer(pop.project(sub).take(np.arange(50)), wk), wk.domain, jax.random.key(0), 4, s)
    t0 = time.perf_counter()
    for tr in tracts:
        unit = pop.take(np.flatnonzero(pop.geography.mask("tract", tr))).project(sub)
        rap_rank(plan, answer(unit, wk), wk.domain, jax.random.key(1), 10, s)
    ups = len(tracts) / (time.perf_counter() - t0)
    out["units_per_s"] = round(ups, 3)
    out["units_per_s_setting"] = "tracts without BLOCK, all 2-way, K=10, T=100, n'=300, one unit per call"
    print(f"units per second: {ups:.2f} ({out['units_per_s_setting']})")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
