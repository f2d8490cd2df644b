"""Evaluate DP releases before publishing: release at each ε, attack the release, compare, audit, report."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from experiments.config import ConfigError, ExperimentConfig
from experiments.metrics import effective_u, k_grid, match_rate_curve
from experiments.progress import UnitProgress
from experiments.problem import (_stable, attributes, baseline_curves, build_priors, build_workload, exact_answers,
                                 load_population, prepare_unit, rap_settings, select_units, unit_blocks, unit_key)
from experiments.release_report import plot_release, release_persons, write_report
from experiments.results import code_fingerprint, jax_info, versions, write_json, write_parquet, write_yaml
from microdata.dataset import Dataset
from microdata.geography import FROM_ROWS
from microdata.marginals import Workload, marginal_counts
from reconstruct.queries import plan_for
from reconstruct.rap import rap_rank
from synth.histogram import DENSE_LIMIT, SparseHistogram, perturbed_histogram, smoothed_histogram
from synth.mechanism import Ledger, Mechanism, PrivacyError, Relation, parse_relation
from synth.noise import SimulationNoise, make_backend
from synth.release import (TOTAL_PUBLIC_BY_RELATION, fit_synthetic, laplace_tables, table_utility,
                           total_queries, workload_counts)

log = logging.getLogger(__name__)


def _backend(cfg: ExperimentConfig, *parts):
    r = cfg.release
    if r.backend == "opendp":
        return make_backend("opendp")
    return SimulationNoise(np.random.default_rng(_stable("noise", cfg.seed, *parts)))


@dataclass
class Published:
    """One release as published, and what an attacker computes from it.

    ``structure`` is the shape of what is published (table cells, histogram size): it must come
    from public inputs only, so it is the same for any two neighbouring datasets (the auditor
    checks). ``answers`` are the workload's answers the attacker derives (fractions; None for a
    batch of runs)."""

    mechanism: str
    record: Mechanism
    output: object
    answers: np.ndarray | None
    structure: tuple
    for_publication: bool
    publication_note: str
    counts: np.ndarray | None = None  # the published table counts in persons (workload order)


def _fit_note(backend, mechanism: str) -> tuple[bool, str]:
    if mechanism == "smoothed_histogram":
        return False, "numpy sampling whatever the backend: a study mechanism, not for publication"
    if backend.for_publication:
        return True, f"{backend.name} discrete Laplace (vetted sampler)"
    return False, "seeded simulation noise: for studies, not for publication"


def publish(cfg: ExperimentConfig, mechanism: str, epsilon: float, D: Dataset, workload, backend,
            rng: np.random.Generator, key=None, runs: int | None = None,
            dense_limit: int = DENSE_LIMIT) -> Published:
    """Release D's tables by ``mechanism`` at ``epsilon``: the one code path evaluate-release
    attacks, the auditor audits and an agency would publish through.

    D's domain (attributes, BLOCK from the public block list) and the workload are public
    inputs. The true n of D reaches the release only where the neighbouring relation makes it
    public (replace-one) or the agency declared it (``release.invariants: [unit_total]``);
    otherwise totals come from the noisy tables. ``runs`` releases that many times at once (the
    auditor's batches; additive mechanisms only).
    """
    r = cfg.release
    declared_total = "unit_total" in r.invariants
    ok, note = _fit_note(backend, mechanism)
    if mechanism in ("laplace_tables", "synthetic"):
        tables, rec = laplace_tables(D, workload, epsilon, backend, r.relation, declared_total=declared_total,
                                     runs=runs)
        structure = ("tables", _labels(workload))
        if mechanism == "laplace_tables" or runs is not None:
            answers = tables.answers() if runs is None else None
            counts = tables.counts.astype(np.float64) if runs is None else None
            return Published("laplace_tables", rec, tables, answers, structure, ok, note, counts)
        synth = fit_synthetic(tables, key, rap_settings(cfg, rows=int(tables.total), batch=1))
        rec = dataclasses.replace(rec, name="synthetic", details={
            **rec.details, "fitted_to": "laplace_tables (post-processing: no further ε)",
            "rows": len(synth), "rows_are": tables.total_source})
        return Published("synthetic", rec, synth, exact_answers(synth, workload),
                         ("rows over", tuple(D.domain.names), D.domain.sizes), ok, note,
                         workload_counts(synth, workload).astype(np.float64))
    if mechanism == "perturbed_histogram":
        hist, rec = perturbed_histogram(D, epsilon, backend, r.relation, rng=rng, runs=runs, dense_limit=dense_limit)
        answers = histogram_answers(hist, workload) if runs is None else None
        counts = None if runs is not None else answers * float(max(hist.counts.sum(), 0))
        return Published(mechanism, rec, hist, answers, ("histogram", D.domain.total_size), ok, note, counts)
    if mechanism == "smoothed_histogram":
        if parse_relation(r.relation) is not Relation.REPLACE_ONE:
            raise ConfigError("the smoothed histogram is DP only under replace_one neighbours (n public)")
        keys, rec = smoothed_histogram(D, epsilon, len(D), rng, runs=runs)  # k = n draws: n is public here
        rec = dataclasses.replace(rec, details={**rec.details, "rows_are": TOTAL_PUBLIC_BY_RELATION})
        drawn = None if runs is not None else Dataset(D.domain, D.domain.decode(keys))
        answers = None if drawn is None else exact_answers(drawn, workload)
        counts = None if drawn is None else workload_counts(drawn, workload).astype(np.float64)
        return Published(mechanism, rec, keys, answers, ("draws from a histogram of", D.domain.total_size), ok, note,
                         counts)
    raise ConfigError(f"unknown mechanism {mechanism!r}")


def _labels(workload) -> tuple:
    if isinstance(workload, Workload):
        return tuple((m, workload.shape(m)) for m in workload.marginals)
    return tuple(workload.labels)


def histogram_answers(hist: SparseHistogram, workload) -> np.ndarray:
    """The workload's answers on the normalised noisy histogram itself (post-processing): no rows
    are sampled from it, so no row count, and no n, enters what the attacker sees."""
    domain = workload.domain
    total = hist.counts.sum()
    if total <= 0:  # nothing left after clipping: the uniform distribution over the domain
        keys = None
    else:
        keys, weights = hist.keys, hist.counts.astype(np.float64) / total
    if keys is None:
        if isinstance(workload, Workload):
            return np.concatenate([np.full(n, 1.0 / n) for n in workload.sizes])
        return np.array([np.prod([len(workload.value_sets[j][q[j]]) / domain.sizes[j] for j in range(len(domain))])
                         for q in workload.queries])
    rows = Dataset(domain, domain.decode(keys))
    if isinstance(workload, Workload):
        return np.concatenate([marginal_counts(rows, m, weights) for m in workload.marginals])
    return workload.counts(rows, weights)


def release_dir(out_root: str | Path, cfg: ExperimentConfig) -> Path:
    """results/<name>/<config-hash>/release/: beside the attack run of the same config, never in it."""
    return Path(out_root) / cfg.name / cfg.digest() / "release"


def evaluate_release(cfg: ExperimentConfig, out_root: str | Path = "results", progress: bool = True) -> Path:
    """Release → attack → compare with the exact-table attack and the baselines, per ε and mechanism."""
    if cfg.release is None:
        raise ConfigError("this config has no 'release' section; see configs/release_demo.yaml")
    t_start = time.perf_counter()
    r = cfg.release
    pop = load_population(cfg)  # fail on bad data before anything is written
    units = select_units(pop, cfg)
    for wb in cfg.target.with_block:
        if wb:
            check_block_list(cfg, pop, units[0])
        if parse_relation(r.relation) is Relation.ADD_REMOVE and "unit_total" not in r.invariants:
            D = prepare_unit(pop, cfg, units[0], wb, pad_blocks=False).private
            try:  # n must come from the noisy tables: they must publish a total or a partition
                total_queries(build_workload(cfg, cfg.queries[0], D.domain))
            except PrivacyError as e:
                raise ConfigError(str(e)) from None
    run_dir = release_dir(out_root, cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(run_dir / "config.yaml", cfg.model_dump(mode="json"))
    ledger = Ledger()
    curves, utility = [], []
    tasks = [(wb, u) for wb in cfg.target.with_block for u in units]
    per_unit = 1 + len(r.epsilons) * len(r.mechanisms)
    units_bar = UnitProgress(len(tasks), "units", progress)
    bar = tqdm(total=len(tasks) * per_unit, desc="releases attacked", disable=not units_bar.tty, leave=False)
    fingerprint = code_fingerprint()
    found = 0
    try:
        for wb, unit in tasks:
            stem = run_dir / "units" / f"{'block' if wb else 'noblock'}_{unit}"
            saved = stem.with_suffix(".json")
            if saved.exists() and json.loads(saved.read_text()).get("code_fingerprint") == fingerprint:
                facts = json.loads(saved.read_text())
                curves.append(pd.read_parquet(stem.with_suffix(".parquet")))
                utility.extend(facts["utility"])
                ledger.entries.extend(facts["ledger"])
                bar.update(per_unit)
                found += 1
                continue
            if found:
                units_bar.found(found, run_dir)
                found = 0
            n_ledger = len(ledger.entries)
            unit_curves, unit_util = _evaluate_unit(cfg, pop, unit, wb, ledger, bar)
            write_parquet(stem.with_suffix(".parquet"), unit_curves)
            write_json(saved, {"code_fingerprint": fingerprint, "utility": unit_util,
                               "ledger": ledger.entries[n_ledger:]})
            curves.append(unit_curves)
            utility.extend(unit_util)
            units_bar.update(1, f"{unit} {'with' if wb else 'without'} BLOCK")
        units_bar.found(found, run_dir)
    except KeyboardInterrupt:
        raise units_bar.interrupted() from None
    finally:
        bar.close()
        units_bar.close()
    df = pd.concat(curves, ignore_index=True)
    util = pd.DataFrame(utility)
    lift = lift_table(df)
    from experiments.release_audit import audit_release

    audits = audit_release(cfg, pop, units[0], progress=progress)
    write_parquet(run_dir / "release_eval.parquet", df)
    write_parquet(run_dir / "utility.parquet", util)
    write_parquet(run_dir / "lift.parquet", lift)
    write_json(run_dir / "ledger.json", {"entries": ledger.entries, "relation": r.relation,
                                         "invariants": list(r.invariants),
                                         "total_epsilon_per_unit": {u: ledger.total_epsilon(unit=u) for u in units}})
    write_json(run_dir / "audit.json", [a.as_dict() for a in audits])
    write_parquet(run_dir / "persons.parquet", release_persons(df))
    facts = {"units": units, "levels": list(pop.geography.levels[1:]), "attributes": attributes(cfg, pop)}
    write_json(run_dir / "manifest.json", {
        "name": cfg.name, "config_hash": cfg.digest(), "code_fingerprint": code_fingerprint(),
        "versions": versions(), "jax": jax_info(), "seeds": {"experiment": cfg.seed, "population": cfg.data.seed},
        "units": units, "facts": facts, "seconds_total": round(time.perf_counter() - t_start, 2),
    })
    plot_release(df, util, run_dir, cfg)
    write_report(cfg, run_dir, df, util, audits, ledger, facts)
    return run_dir


def _evaluate_unit(cfg: ExperimentConfig, pop, unit: str, wb: bool, ledger: Ledger, bar) -> tuple[pd.DataFrame, list]:
    """All releases of one unit, each attacked; plus the exact-table attack and the baselines."""
    r = cfg.release
    prob = prepare_unit(pop, cfg, unit, wb, pad_blocks=False)  # every listed block, empty ones included
    D, H = prob.private, prob.holdout
    truth = D.keys()
    u = effective_u(D.distinct(), H.distinct())
    ks = k_grid(u, cfg.grid_points)
    w = build_workload(cfg, cfg.queries[0], D.domain)
    plan = plan_for(w)
    exact = exact_answers(D, w)
    exact_counts = workload_counts(D, w)
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
    extra = {"unit": unit, "with_block": wb, "invariants": list(r.invariants)}
    if wb:
        extra["block_list"] = prob.block_list_source
    for eps in r.epsilons:
        for mech in r.mechanisms:
            backend = _backend(cfg, unit, mech, eps)
            pub = publish(cfg, mech, eps, D, w, backend, np.random.default_rng(_stable("release", cfg.seed, unit, mech, eps)),
                          key=unit_key(cfg, "fit", unit, eps))
            if getattr(backend, "contrib", False):
                extra.update(opendp_version=backend.version, opendp_contrib=True)
            ledger.record(pub.record, backend.name, pub.for_publication, publication_note=pub.publication_note, **extra)
            rows = table_utility(pub.counts, exact_counts, w)
            utility += [dict(row, epsilon=eps, mechanism=mech, unit=unit, variant=wb) for row in rows]
            curves.append(attack(pub.answers, f"{mech}-{eps}").assign(
                epsilon=eps, mechanism=mech, method="rap_rank",
                utility_error=float(np.mean([row["mae_per_cell"] for row in rows])), **common))
            bar.update()
    return pd.concat(curves, ignore_index=True), utility


def check_block_list(cfg: ExperimentConfig, pop: Dataset, unit: str) -> None:
    """Tables per block may be released only over a public block list, or a list from the persons
    that the agency declares it publishes as it is (``release.invariants: [occupied_blocks]``)."""
    _, source = unit_blocks(pop, cfg, unit)
    if source == FROM_ROWS and "occupied_blocks" not in cfg.release.invariants:
        raise ConfigError(
            "this data has no public block list: its blocks would be "
            f"{FROM_ROWS}. Publishing tables per block over that list reveals which blocks have anyone in them, "
            "which no ε accounts for (replace a block's only resident and the block disappears). Give the public "
            "list of blocks (a units file), or declare release.invariants: [occupied_blocks] to publish it as an "
            "invariant, recorded in the ledger")


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
