"""Run anonymeter's three evaluators on published microdata; a script for anonymeter's own environment.

anonymeter pins numpy < 1.27 and JAX needs numpy >= 2, so the two cannot share one environment:
this file imports nothing of censusrecon and runs under the interpreter of ``.venv-risk``
(``make risk-env``), called by :mod:`experiments.release.risks` as

    python anonymeter_worker.py JOBS.json RESULTS.json

JOBS.json lists evaluations: ``{"id", "ori", "syn", "control"}`` (Parquet paths: the private
rows, the published rows, and a control set from the same population that the release never
saw), ``"aux_cols"`` (two column lists for linkability), ``"secrets"`` (columns to infer),
``"n_attacks"`` and ``"seed"``. RESULTS.json gets one row per (evaluation, risk) with anonymeter's
risk estimate, its confidence interval and the attack, baseline and control success rates.
"""

from __future__ import annotations

import json
import sys
import warnings


def _row(job_id: str, risk: str, results, confidence: float) -> dict:
    r = results.risk()
    return {"id": job_id, "risk": risk, "value": float(r.value), "ci_low": float(r.ci[0]), "ci_high": float(r.ci[1]),
            "attack_rate": float(results.attack_rate.value), "baseline_rate": float(results.baseline_rate.value),
            "control_rate": None if results.control_rate is None else float(results.control_rate.value),
            "n_attacks": int(results.n_attacks_ori), "confidence": confidence,
            # anonymeter's own sanity check: an attack no better than random guessing is not evidence
            "trusted": bool(results.attack_rate.value > results.baseline_rate.value)}


def _compile_once() -> None:
    """anonymeter's nearest-neighbour kernels (linkability) are numba functions it compiles on every start: about 6 s
    of each worker, against 0.5 s for the evaluation itself on a small file. Compiled into numba's on-disk cache
    instead (``NUMBA_CACHE_DIR``, default the user's cache folder), keyed by their source and argument types, so a
    later worker loads them; what they compute is unchanged. Must run before anonymeter is imported."""
    import os
    from pathlib import Path

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    where = os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(base) / "censusrecon" / "numba"))
    try:
        Path(where).mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # nowhere to write the cache (a read-only home): anonymeter compiles as it always does
    if not os.access(where, os.W_OK):
        return
    import numba

    jit = numba.jit

    def cached(*args, **kwargs):
        kwargs.setdefault("cache", True)
        return jit(*args, **kwargs)

    numba.jit = cached


def _distinct_values_in_order() -> None:
    """anonymeter's singling-out baseline picks query values from each column's distinct values, which polars
    lists in hash order, changing from process to process: listed in order of first appearance instead, so a
    rerun prints the same figures. Once per worker process (the worker runs nothing else)."""
    import polars as pl

    by_hash = pl.Series.unique

    def unique(self, *, maintain_order: bool = True):
        return by_hash(self, maintain_order=maintain_order)

    pl.Series.unique = unique


def evaluate(job: dict, confidence: float = 0.95) -> list[dict]:
    import numpy as np
    import pandas as pd
    import polars as pl
    from anonymeter.evaluators import (InferenceEvaluator, LinkabilityEvaluator, SinglingOutEvaluator,
                                       linkability_evaluator)

    np.random.seed(job["seed"])  # anonymeter samples its targets with pandas' global generator
    pl.set_random_seed(job["seed"])  # and rows for its singling-out checks with polars'
    # its random-guess baseline for linkability draws from an unseeded numpy generator: the same draw (each
    # attack's n_neighbors distinct published rows), from the job's seed, so that a rerun prints the same figures
    links_rng = np.random.default_rng([job["seed"], 1])

    def seeded_links(n_synthetic: int, n_attacks: int, n_neighbors: int):
        return np.stack([links_rng.choice(n_synthetic, size=n_neighbors, replace=False) for _ in range(n_attacks)])

    if not hasattr(linkability_evaluator, "_random_links"):  # a release of anonymeter that draws it otherwise
        raise RuntimeError("this anonymeter has no linkability_evaluator._random_links to seed: its random-guess "
                           "baseline would differ from run to run; pin anonymeter as `make risk-env` does")
    linkability_evaluator._random_links = seeded_links
    ori, syn, control = (pd.read_parquet(job[k]) for k in ("ori", "syn", "control"))
    # anonymeter's random-guess baseline for inference draws published rows and aligns them with the targets
    # by index: published rows in the targets' own order (a swapped file keeps D's order) would make that
    # "random" guess the target's own value. Shuffled, the guess at a target's index is a random published row.
    syn = syn.sample(frac=1.0, random_state=job["seed"]).reset_index(drop=True)
    n = int(job["n_attacks"])
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its warnings become the "trusted" flag and the query counts
        # anonymeter keeps drawing random queries until n of them single someone out in the published rows;
        # where too few exist it stops at max_attempts (its default, 10^7, takes minutes) and says how many it found
        so = SinglingOutEvaluator(ori=ori, syn=syn, control=control, n_attacks=n, n_cols=min(3, ori.shape[1]),
                                  max_attempts=job.get("max_attempts", 20_000),
                                  seed=job["seed"]).evaluate(mode="multivariate")
        out.append(dict(_row(job["id"], "singling_out", so.results(confidence), confidence),
                        queries=len(so.queries())))
        link = LinkabilityEvaluator(ori=ori, syn=syn, control=control, n_attacks=n,
                                    aux_cols=tuple(job["aux_cols"]), n_neighbors=10).evaluate(n_jobs=1)
        out.append(_row(job["id"], "linkability", link.results(confidence), confidence))
        for secret in job["secrets"]:
            aux = [c for c in ori.columns if c != secret]
            inf = InferenceEvaluator(ori=ori, syn=syn, control=control, aux_cols=aux, secret=secret,
                                     n_attacks=n).evaluate(n_jobs=1)
            out.append(_row(job["id"], f"inference:{secret}", inf.results(confidence), confidence))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: anonymeter_worker.py JOBS.json RESULTS.json", file=sys.stderr)
        return 2
    _compile_once()
    _distinct_values_in_order()
    spec = json.loads(open(argv[0], encoding="utf-8").read())
    rows = [row for job in spec["jobs"] for row in evaluate(job, spec.get("confidence", 0.95))]
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(rows, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
