"""Evaluate DP releases before publishing: release at each ε, attack the release, compare, audit, report."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from experiments.config import ConfigError, ExperimentConfig
from experiments.metrics import effective_u, k_grid, match_rate_curve
from experiments.release_report import plot_release, write_report
from experiments.results import code_fingerprint, jax_info, versions, write_json, write_parquet, write_yaml
from experiments.runner import (_stable, baseline_curves, build_priors, build_workload, exact_answers, load_population,
                                prepare_unit, rap_settings, select_units, unit_key)
from microdata.dataset import Dataset
from microdata.domain import Domain
from microdata.marginals import Workload, answer
from reconstruct.queries import plan_for
from reconstruct.rap import rap_rank
from synth.audit import AuditResult, audit, neighbouring_counts
from synth.histogram import perturbed_histogram, smoothed_delta, smoothed_histogram
from synth.mechanism import Ledger, Relation
from synth.noise import SimulationNoise, make_backend
from synth.release import fit_synthetic, laplace_tables, table_errors

log = logging.getLogger(__name__)


def _backend(cfg: ExperimentConfig, *parts):
    r = cfg.release
    if r.backend == "opendp":
        return make_backend("opendp")
    return SimulationNoise(np.random.default_rng(_stable("noise", cfg.seed, *parts)))


def _release(cfg, mechanism: str, eps: float, D: Dataset, workload, unit, ledger: Ledger):
    """One DP release of D; returns the answers an attacker computes from it (fractions)."""
    r = cfg.release
    backend = _backend(cfg, unit, mechanism, eps)
    rng = np.random.default_rng(_stable("release", cfg.seed, unit, mechanism, eps))
    extra = {"unit": unit}
    if getattr(backend, "contrib", False):
        extra.update(opendp_version=backend.version, opendp_contrib=True)
    if mechanism in ("laplace_tables", "synthetic"):
        tables, mech = laplace_tables(D, workload, eps, backend, r.relation)
        ledger.record(mech, backend.name, backend.for_publication, **extra)
        if mechanism == "laplace_tables":
            return tables.answers()
        synth = fit_synthetic(tables, unit_key(cfg, "fit", unit, eps), rap_settings(cfg, rows=len(D), batch=1))
        return exact_answers(synth, workload)
    if mechanism == "perturbed_histogram":
        hist, mech = perturbed_histogram(D, eps, backend, r.relation, rng=rng)
        ledger.record(mech, backend.name, backend.for_publication, **extra)
        rows = hist.sample(len(D), rng)
    else:
        rows, mech = smoothed_histogram(D, eps, len(D), rng)
        ledger.record(mech, "simulation (numpy sampling; not for publication)", False, **extra)
    return exact_answers(Dataset(D.domain, D.domain.decode(rows)), workload)


def audit_mechanisms(cfg: ExperimentConfig) -> list[AuditResult]:
    """Audit every configured mechanism at ``release.audit.epsilon`` on worst-case neighbours.

    Each mechanism calibrates itself through its own code path (sensitivity from the
    declared relation, scale Δ/ε) on a small dataset; the auditor then draws its noise in
    bulk from the simulation sampler on a worst-case neighbouring pair. The synthetic
    release is post-processing of the Laplace tables and is audited as them.
    """
    r = cfg.release
    a = r.audit
    eps = a.epsilon
    rel = Relation(r.relation)
    rng = np.random.default_rng(_stable("audit", cfg.seed))
    noise = SimulationNoise(rng)
    cells = 4
    d, d2 = neighbouring_counts(rel, cells)
    toy = Dataset(Domain.from_sizes({"A": cells}), np.repeat(np.arange(cells), d)[:, None])
    toy_tables = Workload(toy.domain, (("A",),))

    def additive(scale):
        return lambda counts, runs: counts[None, :] + noise.sample(scale, runs * counts.size).reshape(runs, counts.size)

    out = []
    for mech in r.mechanisms:
        if mech in ("laplace_tables", "synthetic"):
            scale = laplace_tables(toy, toy_tables, eps, noise, rel)[1].scale
            res = audit(additive(scale), d, d2, eps, mech, a.runs, a.confidence)
        elif mech == "perturbed_histogram":
            scale = perturbed_histogram(toy, eps, noise, rel)[1].scale
            res = audit(additive(scale), d, d2, eps, mech, a.runs, a.confidence)
        else:  # the output is k draws: audit the counts of the two moved cells among them
            k = 10
            delta = smoothed_delta(eps, int(d.sum()), cells, k)

            def q_of(counts, delta=delta):
                return (1 - delta) * counts / counts.sum() + delta / counts.size

            def draws(counts, runs):
                return rng.multinomial(k, q_of(counts), size=runs)

            ref = np.floor(k * q_of(d)).astype(np.int64)
            res = audit(draws, d, d2, eps, mech, a.runs, a.confidence, offsets=(1, 2, 3, 4, 5, 6), reference=ref)
        out.append(res)
    return out


def evaluate_release(cfg: ExperimentConfig, out_root: str | Path = "results", progress: bool = True) -> Path:
    """Release → attack → compare with the exact-table attack and the baselines, per ε and mechanism."""
    if cfg.release is None:
        raise ConfigError("this config has no 'release' section; see configs/release_demo.yaml")
    t_start = time.perf_counter()
    r = cfg.release
    pop = load_population(cfg)  # fail on bad data before anything is written
    units = select_units(pop, cfg)
    run_dir = Path(out_root) / cfg.name / cfg.digest()
    run_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(run_dir / "config.yaml", cfg.model_dump(mode="json"))
    ledger = Ledger()
    curves, utility = [], []
    tasks = [(wb, u) for wb in cfg.target.with_block for u in units]
    per_unit = 1 + len(r.epsilons) * len(r.mechanisms)
    bar = tqdm(total=len(tasks) * per_unit, desc="releases attacked", disable=not progress)
    fingerprint = code_fingerprint()
    for wb, unit in tasks:
        stem = run_dir / "units" / f"{'block' if wb else 'noblock'}_{unit}"
        saved = stem.with_suffix(".json")
        if saved.exists() and json.loads(saved.read_text()).get("code_fingerprint") == fingerprint:
            facts = json.loads(saved.read_text())
            curves.append(pd.read_parquet(stem.with_suffix(".parquet")))
            utility.extend(facts["utility"])
            ledger.entries.extend(facts["ledger"])
            bar.update(per_unit)
            continue
        n_ledger = len(ledger.entries)
        unit_curves, unit_util = _evaluate_unit(cfg, pop, unit, wb, ledger, bar)
        write_parquet(stem.with_suffix(".parquet"), unit_curves)
        write_json(saved, {"code_fingerprint": fingerprint, "utility": unit_util,
                           "ledger": ledger.entries[n_ledger:]})
        curves.append(unit_curves)
        utility.extend(unit_util)
    bar.close()
    df = pd.concat(curves, ignore_index=True)
    util = pd.DataFrame(utility)
    lift = lift_table(df)
    audits = audit_mechanisms(cfg)
    write_parquet(run_dir / "release_eval.parquet", df)
    write_parquet(run_dir / "utility.parquet", util)
    write_parquet(run_dir / "lift.parquet", lift)
    write_json(run_dir / "ledger.json", {"entries": ledger.entries,
                                         "total_epsilon_per_unit": {u: ledger.total_epsilon(unit=u) for u in units}})
    write_json(run_dir / "audit.json", [a.as_dict() for a in audits])
    plot_release(df, lift, run_dir, cfg)
    write_report(cfg, run_dir, lift, util, audits, ledger)
    write_json(run_dir / "manifest.json", {
        "name": cfg.name, "config_hash": cfg.digest(), "code_fingerprint": code_fingerprint(),
        "versions": versions(), "jax": jax_info(), "seeds": {"experiment": cfg.seed, "population": cfg.data.seed},
        "units": units, "seconds_total": round(time.perf_counter() - t_start, 2),
    })
    return run_dir


def _evaluate_unit(cfg: ExperimentConfig, pop, unit: str, wb: bool, ledger: Ledger, bar) -> tuple[pd.DataFrame, list]:
    """All releases of one unit, each attacked; plus the exact-table attack and the baselines."""
    r = cfg.release
    prob = prepare_unit(pop, cfg, unit, wb, pad_blocks=False)  # release exactly the real blocks
    D, H = prob.private, prob.holdout
    truth = D.keys()
    u = effective_u(D.distinct(), H.distinct())
    ks = k_grid(u, cfg.grid_points)
    w = build_workload(cfg, cfg.queries[0], D.domain)
    plan = plan_for(w)
    exact = exact_answers(D, w)
    settings = rap_settings(cfg)
    tie_rng = np.random.default_rng(_stable("ties", cfg.seed, unit, wb))

    def attack(targets, tag):
        res = rap_rank(plan, targets, D.domain, unit_key(cfg, "attack", unit, wb, tag), cfg.attack.runs,
                       settings, rng=tie_rng, limit=int(ks.max()))
        return match_rate_curve(res.ranking, truth, ks, u)

    common = dict(unit=unit, variant=wb, u=u, n_rows=len(D))
    curves = [attack(exact, "exact").assign(epsilon=math.inf, mechanism="exact", method="rap_rank",
                                            utility_error=0.0, **common)]
    bar.update()
    priors = build_priors(pop, cfg, prob)
    for b, curve, _ in baseline_curves(cfg, priors, unit, truth, ks, u, lambda b: tie_rng):
        curves.append(curve.assign(epsilon=np.nan, mechanism="baseline", method=b, utility_error=np.nan, **common))
    utility = []
    for eps in r.epsilons:
        for mech in r.mechanisms:
            released = _release(cfg, mech, eps, D, w, unit, ledger)
            names, errs = table_errors(released, exact, w)
            for name, e in zip(names, errs):
                utility.append(dict(epsilon=eps, mechanism=mech, unit=unit, variant=wb, table=name,
                                    tv_error=float(e)))
            curves.append(attack(released, f"{mech}-{eps}").assign(
                epsilon=eps, mechanism=mech, method="rap_rank", utility_error=float(errs.mean()), **common))
            bar.update()
    return pd.concat(curves, ignore_index=True), utility


def lift_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (ε, mechanism, unit): area under RAP-Rank's match-rate curve minus the best baseline's.

    Areas are means over the unit's k/u grid (k/u ∈ (0, 1]); the best baseline is the one
    with the largest area on that unit. ε = inf is the attack on the exact tables.
    """
    area = df.groupby(["variant", "unit", "epsilon", "mechanism", "method"], dropna=False)["match_rate"].mean()
    area = area.reset_index()
    base = area[area["mechanism"] == "baseline"]
    best = base.loc[base.groupby(["variant", "unit"])["match_rate"].idxmax(), ["variant", "unit", "method", "match_rate"]]
    best = best.rename(columns={"method": "best_baseline", "match_rate": "baseline_area"})
    rap = area[area["mechanism"] != "baseline"].rename(columns={"match_rate": "rap_area"}).drop(columns="method")
    out = rap.merge(best, on=["variant", "unit"])
    out["lift"] = out["rap_area"] - out["baseline_area"]
    util = df[df["mechanism"] != "baseline"].groupby(["variant", "unit", "epsilon", "mechanism"])["utility_error"].first()
    return out.merge(util.reset_index(), on=["variant", "unit", "epsilon", "mechanism"])
