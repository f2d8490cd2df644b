"""Bench: RAP steps/s on a ~15-attribute 3-way-marginal workload, and the K-run path's speedup.

Prints its figures, then one JSON object as the last line. Every figure that compares is a
ratio measured in this one run (the machine is shared and noisy): the batched K-run path
(as the implementation chooses for the backend) against strictly one run at a time, on the
same runs, the same steps and the same compiled shapes.

    python bench/rap.py            # defaults: n'=1000, 3-way, 15 attributes
    python bench/rap.py --quick    # smaller, for a smoke check
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.marginals import Workload, answer
from censusrecon.reconstruct.queries import MarginalPlan
from censusrecon.reconstruct.rap import RAPSettings, default_batch, rap_rank, use_cpu_cores_as_devices

# An ACS-like domain of 15 attributes (one-hot width 191 minus the last attribute's 2).
SIZES = (92, 24, 5, 18, 2, 9, 2, 3, 5, 5, 4, 4, 4, 3, 9)


def _data(n: int, seed: int = 0) -> Dataset:
    dom = Domain.from_sizes({f"X{i}": s for i, s in enumerate(SIZES)})
    rng = np.random.default_rng(seed)
    # correlated columns: a latent class drives every attribute
    z = rng.integers(0, 8, n)
    cols = [(z * (i + 3) + rng.integers(0, max(2, s // 3), n)) % s for i, s in enumerate(SIZES)]
    return Dataset(dom, np.stack(cols, axis=1))


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1000, help="n'")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60, help="T per timed fit")
    ap.add_argument("--runs", type=int, default=8, help="runs in the K-run comparison")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    use_cpu_cores_as_devices()  # as the CLI does: one JAX device per core
    if args.quick:
        args.rows, args.steps, args.runs = 200, 20, 4

    data = _data(5000)
    w = Workload.all_kway(data.domain, args.k)
    plan = MarginalPlan.build(w)
    targets = answer(data, w)
    key = jax.random.key(0)
    print(f"backend {jax.default_backend()}; {len(SIZES)} attributes, {len(w.marginals)} {args.k}-way marginals, "
          f"{w.num_queries} queries, {len(plan.middles) + len(plan.gram)} forward matmuls per step; n'={args.rows}")

    batch = max(2, default_batch(RAPSettings(rows=args.rows), args.runs, plan))
    one = RAPSettings(rows=args.rows, steps=args.steps, batch=1, steps_per_call=args.steps)
    many = RAPSettings(rows=args.rows, steps=args.steps, batch=batch, steps_per_call=args.steps)
    # compile both programs first (one run each shape), then time warm calls
    _, c1 = _timed(lambda: rap_rank(plan, targets, data.domain, key, 1, one))
    _, cb = _timed(lambda: rap_rank(plan, targets, data.domain, key, batch, many))
    _, t_one = _timed(lambda: rap_rank(plan, targets, data.domain, key, args.runs, one))
    _, t_many = _timed(lambda: rap_rank(plan, targets, data.domain, key, args.runs, many))
    steps_per_s = args.steps / (t_one / args.runs)
    run_steps_per_s = args.runs * args.steps / t_many
    speedup = t_one / t_many
    print(f"compile+first call: one-at-a-time {c1:.1f}s, batch of {batch} {cb:.1f}s")
    print(f"one run at a time: {t_one:.2f}s for {args.runs} runs x {args.steps} steps = {steps_per_s:.1f} steps/s")
    print(f"K-run path (vmap batch {batch}): {t_many:.2f}s = {run_steps_per_s:.1f} run-steps/s")
    print(f"batched speedup: {speedup:.2f}x")
    print(json.dumps({
        "backend": jax.default_backend(), "attributes": len(SIZES), "k": args.k,
        "marginals": len(w.marginals), "queries": w.num_queries, "rows": args.rows,
        "steps_per_s": round(steps_per_s, 2), "batched_run_steps_per_s": round(run_steps_per_s, 2),
        "batch": batch, "batched_speedup": round(speedup, 3),
    }))


if __name__ == "__main__":
    main()
