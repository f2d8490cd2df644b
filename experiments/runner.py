"""Run one experiment config end to end: units, split, queries, RAP-Rank, baselines, metrics, files."""

from __future__ import annotations

import itertools
import json
import logging
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from baselines.holdout import holdout_split
from baselines.priors import ChancePrior, EmpiricalPrior, geographic_priors
from experiments.config import ConfigError, ExperimentConfig
from experiments.metrics import (OUTSIDE_COLUMNS, calibration, concentration, effective_u, k_grid,
                                 lift_by_baseline, lookup, match_rate_curve, persons_reconstructed)
from experiments.plots import plot_match_rate, plot_metrics
from experiments.results import code_fingerprint, jax_info, versions, write_json, write_parquet, write_yaml
from microdata.dataset import Dataset
from microdata.domain import Attribute
from microdata.marginals import Workload, answer
from microdata.acs import read_folktables, read_nist
from microdata.population import PopulationSpec, embedded_population
from reconstruct.queries import EXACT_CHUNK, exact_counts, plan_for
from reconstruct.rap import RAPSettings, default_batch, rap_rank_units

log = logging.getLogger(__name__)

_INIT_POOL_ROWS = 20_000


#: Attack attributes when a config names none.
EMBEDDED_ATTRIBUTES = ["AGE", "SEX", "HISP", "RACE"]


def load_population(cfg: ExperimentConfig) -> Dataset:
    """The rows of the configured source (all of them; units are picked later)."""
    d = cfg.data
    if d.source == "embedded":
        p = d.population
        spec = PopulationSpec(
            states=p.states,
            counties_per_state=p.counties_per_state,
            tracts_per_county=p.tracts_per_county,
            blocks_per_tract=tuple(p.blocks_per_tract),
            block_size_median=p.block_size_median,
        )
        pop = embedded_population(d.seed, spec)
    elif d.source == "acs_nist":
        pop = read_nist(d.path, attributes=cfg.attributes, bounds=d.bounds, bins=d.bins, dictionary=d.dictionary)
    elif d.source == "ppmf":
        from microdata.ppmf import read_ppmf

        pop = read_ppmf(d.path, states=d.states or None, counties=d.counties or None, tracts=d.tracts or None)
    else:
        pop = read_folktables(d.path, d.states, d.task, year=d.year, horizon=d.horizon,
                              include_target=d.include_target, bounds=d.bounds, bins=d.bins, download=d.download)
    check_census_tables(cfg, pop)
    missing = [a for a in attributes(cfg, pop) if a not in pop.domain]
    if missing:
        raise ConfigError(f"attributes {missing} are not in the data; it has {list(pop.domain.names)}")
    check_against_data(cfg, pop)
    return pop


def check_census_tables(cfg: ExperimentConfig, pop: Dataset) -> None:
    """Census tables need AGE, SEX, HISP, CENRACE; name the tables this data cannot build."""
    from microdata.census import required_attributes, tables_needing

    for q in cfg.queries:
        if q.kind != "census":
            continue
        cells = census_cells(q)
        have = set(pop.domain.names) & set(attributes(cfg, pop))
        missing = sorted(required_attributes(cells) - have)
        if missing:
            raise ConfigError(
                f"this data cannot build census tables {tables_needing(cells, missing)}: they need {missing}, which it lacks "
                f"(it has {list(pop.domain.names)}; the redistricting PPMF has no QAGE or QSEX). "
                f"Restrict queries.tables to ones it supports, e.g. tables: race_hispanic (P1, P6, P7, P8, P9), "
                f"and attributes to {[a for a in ('HISP', 'CENRACE') if a in pop.domain]}")


def attributes(cfg: ExperimentConfig, pop: Dataset) -> list[str]:
    if cfg.attributes is not None:
        return list(cfg.attributes)
    return EMBEDDED_ATTRIBUTES if cfg.data.source == "embedded" else list(pop.domain.names)


def check_against_data(cfg: ExperimentConfig, pop: Dataset) -> None:
    """Levels, baselines and initialisations must exist in this data's geography."""
    geo = pop.geography
    if geo is None:
        raise ConfigError("the data has no geography; target units cannot be chosen")
    level = cfg.target.level
    if level not in geo.levels or level == "national":
        raise ConfigError(f"target.level {level!r} is not a level of this data; choose from {list(geo.levels[1:])}")
    allowed = {"holdout", "chance", *geo.coarser(level)}
    bad = [b for b in cfg.baselines.methods if b not in allowed]
    if bad:
        raise ConfigError(f"baselines {bad} are not valid for {level} targets; choose from {sorted(allowed)}")
    bad = [i for i in cfg.attack.init if i not in {"random", *allowed}]
    if bad:
        raise ConfigError(f"attack.init {bad} not valid for {level} targets; choose from {sorted({'random', *allowed})}")
    if any(cfg.target.with_block) and "block" not in geo.finer(level):
        raise ConfigError(f"target.with_block: true needs a block level below {level!r}; this data has {list(geo.levels)}")


def _stable(*parts) -> int:
    return zlib.crc32("|".join(str(p) for p in parts).encode())


def select_units(pop: Dataset, cfg: ExperimentConfig) -> list[str]:
    """Target units: explicit ``unit_ids``, one per state, or at random, among units with
    between ``min_rows`` and ``max_rows`` persons; seeded by the config's seed."""
    geo = pop.geography
    level = cfg.target.level
    ids, counts = np.unique(geo.units(level), return_counts=True)
    ok = counts >= cfg.target.min_rows
    if cfg.target.max_rows is not None:
        ok &= counts <= cfg.target.max_rows
    if cfg.target.require_siblings:
        parent_level = geo.coarser(level)[0]
        pairs = pd.DataFrame({"unit": geo.units(level), "parent": geo.units(parent_level)}).drop_duplicates()
        siblings = pairs.groupby("parent")["unit"].transform("size")
        ok &= np.isin(ids, pairs.loc[siblings > 1, "unit"].to_numpy())
    eligible = ids[ok]
    if cfg.target.unit_ids is not None:
        unknown = [u for u in cfg.target.unit_ids if u not in set(ids.tolist())]
        if unknown:
            raise ConfigError(f"target.unit_ids {unknown} are not {level}s of the data (e.g. {ids[:3].tolist()})")
        return list(cfg.target.unit_ids)
    if eligible.size == 0:
        raise ConfigError(f"no {level} has between {cfg.target.min_rows} and {cfg.target.max_rows} rows")
    rng = np.random.default_rng(_stable("units", cfg.seed))
    by_parent_level = geo.coarser(level)[-2] if len(geo.coarser(level)) > 1 else "national"  # the state
    if cfg.target.selection == "size_quantiles":  # units spread evenly over the size distribution
        sizes = counts[ok]
        order = np.argsort(sizes, kind="stable")
        n = min(cfg.target.units, eligible.size)
        picks = np.unique(np.round(np.linspace(0, eligible.size - 1, n)).astype(int))
        return sorted(eligible[order[picks]].tolist())
    if cfg.target.selection == "random":
        pick = rng.choice(eligible.size, size=min(cfg.target.units, eligible.size), replace=False)
        return sorted(eligible[pick].tolist())
    # one per state, round-robin over states until enough units
    state_of = dict(zip(geo.units(level).tolist(), geo.units(by_parent_level).tolist()))
    by_state: dict[str, list[str]] = {}
    for u in eligible.tolist():
        by_state.setdefault(state_of[u], []).append(u)
    for s in by_state:
        rng.shuffle(by_state[s])
    chosen: list[str] = []
    while len(chosen) < cfg.target.units and any(by_state.values()):
        for s in sorted(by_state):
            if by_state[s] and len(chosen) < cfg.target.units:
                chosen.append(by_state[s].pop())
    return sorted(chosen)


@dataclass
class UnitProblem:
    unit: str
    with_block: bool
    private: Dataset  # D, over the attack domain
    holdout: Dataset  # D_holdout
    block_weights: np.ndarray | None


def prepare_unit(pop: Dataset, cfg: ExperimentConfig, unit: str, with_block: bool,
                 pad_blocks: bool = True) -> UnitProblem:
    """D and D_holdout of one unit over the attack domain. With BLOCK, the unit's blocks are
    padded (``pad_blocks``) up to a multiple of ``target.block_bucket`` with empty blocks: their
    published cells are all 0 (as an agency's tables for an empty block are), nobody lives or
    is guessed there, and every unit of a bucket then has the same domain, hence one plan and
    one compiled program."""
    level = cfg.target.level
    rows = np.flatnonzero(pop.geography.mask(level, unit))
    data = pop.take(rows).project(attributes(cfg, pop))
    if with_block:
        blocks, code = np.unique(data.geography.units("block"), return_inverse=True)
        names = tuple(b[-4:] for b in blocks)
        if pad_blocks:
            names += tuple(f"empty{i}" for i in range(-len(names) % cfg.target.block_bucket))
        data = data.with_column(Attribute("BLOCK", names), code, 0)
    rng = np.random.default_rng(_stable("split", cfg.seed, unit))
    private, holdout = holdout_split(data, rng, cfg.holdout_fraction)
    weights = None
    if with_block:
        weights = np.bincount(private.column("BLOCK"), minlength=private.domain.sizes[0]).astype(np.float64)
    return UnitProblem(unit, with_block, private, holdout, weights)


def run_unit(pop: Dataset, cfg: ExperimentConfig, unit: str, with_block: bool,
             runs_bar: tqdm | None = None, only: set[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """Attack one unit with every configured method (or those in ``only``; ``"baselines"``
    stands for all baselines); returns its curve rows and its facts."""
    return run_units(pop, cfg, [(unit, with_block)], runs_bar, only)[0]


@dataclass
class _UnitWork:
    prob: UnitProblem
    truth: np.ndarray
    u: int
    ks: np.ndarray
    workloads: dict
    priors: dict
    outside: tuple[np.ndarray, np.ndarray] | None


def run_units(pop: Dataset, cfg: ExperimentConfig, tasks: list[tuple[str, bool]],
              runs_bar: tqdm | None = None, only: set[str] | None = None) -> list[tuple[pd.DataFrame, dict]]:
    """Attack several units at once: for each RAP method, the units whose workloads share one
    evaluation plan (same domain and queries) are fitted by :func:`rap_rank_units` in shared
    compiled calls. Each unit's result is what :func:`run_unit` gives it alone."""
    work = []
    for unit, wb in tasks:
        prob = prepare_unit(pop, cfg, unit, wb)
        D, H = prob.private, prob.holdout
        u = effective_u(D.distinct(), H.distinct())
        workloads = {}
        for q in cfg.queries:
            w = build_workload(cfg, q, D.domain)
            plan = plan_for(w)
            workloads[q.label] = (q, w, plan, exact_answers(D, w, plan))  # Q(D): all the attack sees of D
        work.append(_UnitWork(prob, D.keys(), u, k_grid(u, cfg.grid_points), workloads,
                              build_priors(pop, cfg, prob), outside_counts(pop, cfg, prob)))
    a = cfg.attack

    def ties(w: _UnitWork, method: str) -> np.random.Generator:  # per method: a sweep task matches the full run
        return np.random.default_rng(_stable("ties", cfg.seed, w.prob.unit, w.prob.with_block, method))

    frames = [[] for _ in work]
    timings = [{} for _ in work]
    rap_facts = [{} for _ in work]
    calib = [[] for _ in work]
    for q, init in itertools.product(cfg.queries, a.init):
        name = cfg.rap_method(q, init)
        if only is not None and name not in only:
            continue
        groups: dict = {}  # (plan, settings) -> indices of the units that share compiled calls
        for i, w in enumerate(work):
            if init != "random" and init not in w.priors:
                log.warning("unit %s: no data for init %s (nothing outside the unit at that level); skipped",
                            w.prob.unit, init)
                continue
            groups.setdefault((w.workloads[q.label][2], unit_settings(cfg, w.prob, init)), []).append(i)
        for (plan, settings), idx in groups.items():
            members = [work[i] for i in idx]
            pools = None
            if init != "random":
                pools = [init_pool(cfg, m.prob, m.priors[init], init, settings.rows) for m in members]
            keys = [unit_key(cfg, "rap", m.prob.unit, m.prob.with_block, init, q.label) for m in members]
            if runs_bar is not None:
                runs_bar.reset(total=a.runs * len(members))
                runs_bar.set_description(f"{name} K runs" + (f" x {len(members)} units" if len(members) > 1 else ""))
            results = rap_rank_units(plan, [m.workloads[q.label][3] for m in members], members[0].prob.private.domain,
                                     keys, a.runs, settings, init_pools=pools,
                                     on_batch=(runs_bar.update if runs_bar is not None else None),
                                     rngs=[ties(m, name) for m in members],
                                     limit=[int(m.ks.max()) for m in members])
            for i, m, res in zip(idx, members, results):
                workload = m.workloads[q.label][1]
                timings[i][name] = round(res.seconds, 3)
                rap_facts[i][name] = {"mean_final_loss": float(res.final_loss.mean()),
                                      "mean_max_abs_error": float(res.max_abs_error.mean()),
                                      "distinct_candidates": int(res.union_size),
                                      "rows_per_run": int(res.codes.shape[1]), "relaxed_rows": settings.rows,
                                      "units_in_call": len(members)}
                frames[i].append(match_rate_curve(res.ranking, m.truth, m.ks, m.u, res.union_size, m.outside)
                                 .assign(method=name, num_queries=workload.num_queries))
                calib[i] += calibration(*res.run_fractions(), m.truth, a.runs).assign(method=name).to_dict("records")
    out = []
    for i, w in enumerate(work):
        D, H = w.prob.private, w.prob.holdout
        if only is None or "baselines" in only:
            for b, curve, seconds in baseline_curves(cfg, w.priors, w.prob.unit, w.truth, w.ks, w.u,
                                                     lambda b, w=w: ties(w, b), w.outside):
                timings[i][b] = seconds
                frames[i].append(curve.assign(method=b, num_queries=0))
        df = pd.concat(frames[i], ignore_index=True)
        df = df.assign(variant=w.prob.with_block, unit=w.prob.unit, u=w.u, n_rows=len(D))
        facts = {
            "unit": w.prob.unit, "with_block": w.prob.with_block, "rows": len(D), "holdout_rows": len(H),
            "distinct_rows": D.distinct(), "holdout_distinct_rows": H.distinct(), "u": w.u,
            "workloads": {label: workload_facts(q, wl) for label, (q, wl, _, _) in w.workloads.items()},
            "domain": dict(zip(D.domain.names, D.domain.sizes)), "seconds": timings[i], "rap": rap_facts[i],
            "concentration": concentration(w.truth), "calibration": calib[i],
        }
        out.append((df, facts))
    return out


def baseline_curves(cfg: ExperimentConfig, priors: dict, unit: str, truth, ks, u, rng_of, outside=None):
    """(name, match-rate curve, seconds) of each configured baseline this unit has data for, in
    config order; a baseline without data is named in a warning and skipped. ``rng_of(name)``
    gives the generator that breaks that baseline's ties."""
    out = []
    for b in cfg.baselines.methods:
        if b not in priors:
            log.warning("unit %s: no data for baseline %s; skipped", unit, b)
            continue
        t0 = time.perf_counter()
        r = priors[b].ranking(rng=rng_of(b), limit=int(ks.max()))
        curve = match_rate_curve(r, truth, ks, u, priors[b].support_size(), outside)
        out.append((b, curve, round(time.perf_counter() - t0, 3)))
    return out


def units_per_call(cfg: ExperimentConfig, pop: Dataset) -> int:
    """How many units to attack together: enough to fill one compiled batch of (unit, run)
    pairs when K alone does not (on a GPU, thousands of pairs per call), capped so that a crash
    loses at most that many units' work. Sized for the largest configured workload, over the
    person attributes (with BLOCK a census workload adds per-block queries whose count varies by
    unit; the cap bounds what that can add)."""
    dom = pop.project(attributes(cfg, pop)).domain
    settings = rap_settings(cfg)
    batch = min(default_batch(settings, 1 << 20, plan_for(build_workload(cfg, q, dom))) for q in cfg.queries)
    return int(min(64, max(1, -(-batch // cfg.attack.runs))))


def census_cells(q) -> list:
    """The census cells a query config names."""
    from microdata.census import TABLE_SETS, reference_cells, sf1_tables

    if q.tables == "reference":
        return reference_cells()
    tables = sf1_tables()
    names = TABLE_SETS[q.tables] if isinstance(q.tables, str) else q.tables
    return [c for name in names for c in tables[name]]


def method_names(cfg: ExperimentConfig) -> list[str]:
    """Every RAP-Rank method a config runs (one per workload and initialisation)."""
    return [cfg.rap_method(q, init) for q in cfg.queries for init in cfg.attack.init]


def build_workload(cfg: ExperimentConfig, q, domain):
    """The published queries of workload ``q`` over the attack domain: k-way marginals
    (a seeded sample if asked) or census table cells (per block when BLOCK is kept)."""
    if q.kind == "census":
        from microdata.census import CensusWorkload

        return CensusWorkload.build(domain, census_cells(q))
    w = Workload.all_kway(domain, q.k, lower=q.lower)
    if q.max_marginals is not None:
        w = w.sample(q.max_marginals, np.random.default_rng(_stable("workload", cfg.seed, q.label)))
    return w


def unit_key(cfg: ExperimentConfig, *parts) -> jax.Array:
    """The JAX key of one attack: stable in the config seed and the parts naming the attack."""
    return jax.random.fold_in(jax.random.key(cfg.seed), _stable(*parts) & 0x7FFFFFFF)


def rarity_level(geo, level: str) -> str:
    """The unit an outsider sees around a target: the county for tracts and blocks (when the
    data has counties), else the next coarser level (the state for PUMAs)."""
    coarser = geo.coarser(level)
    return "county" if "county" in coarser else coarser[0]


def outside_counts(pop: Dataset, cfg: ExperimentConfig, prob: UnitProblem) -> tuple[np.ndarray, np.ndarray] | None:
    """For each distinct row of D (sorted keys over D's domain), how many persons outside the
    target unit, in the enclosing unit of :func:`rarity_level`, share its person attributes
    (BLOCK is not a person attribute: with BLOCK the rest of the row is counted). A match with
    count 0 is a row no outsider could have seen (Sánchez et al. 2023's question). None when
    the target has no coarser level below national."""
    geo = pop.geography
    level = cfg.target.level
    if len(geo.coarser(level)) < 2:  # only national above: nothing one level up
        return None
    around = rarity_level(geo, level)
    parent = geo.parent(level, prob.unit, around)
    outside = (geo.units(around) == parent) & ~geo.mask(level, prob.unit)
    attrs = attributes(cfg, pop)
    pool = pop.project(attrs)
    uniq, counts = np.unique(pool.domain.encode(pool.codes[outside]), return_counts=True)
    D = prob.private
    keys, first = np.unique(D.keys(), return_index=True)
    person = D.project(attrs).keys()[first]
    return keys, lookup(uniq, counts, person, missing=0).astype(np.int64)


def unit_queries(cfg: ExperimentConfig) -> list[dict]:
    """Per target unit (and BLOCK variant): blocks, distinct queries, and cells per table asked for."""
    pop = load_population(cfg)
    out = []
    for wb in cfg.target.with_block:
        for unit in select_units(pop, cfg):
            prob = prepare_unit(pop, cfg, unit, wb, pad_blocks=False)  # what is published, not the padding
            rows = np.flatnonzero(pop.geography.mask(cfg.target.level, unit))
            n_blocks = len(set(pop.geography.units("block")[rows].tolist())) if "block" in pop.geography.levels else 0
            for q in cfg.queries:
                w = build_workload(cfg, q, prob.private.domain)
                cells = (dict(w.cells_per_table) if not isinstance(w, Workload)
                         else {"×".join(m): int(np.prod(w.shape(m))) for m in w.marginals})
                out.append({"unit": unit, "with_block": wb, "workload": q.label, "num_blocks": n_blocks,
                            "num_queries": w.num_queries, "cells_per_table": cells})
    return out


def exact_answers(data: Dataset, w, plan=None) -> np.ndarray:
    """Q(D) as fractions. Large units go through the plan's matmul counter (exact integer
    counts, several times the rate of one bincount per marginal); small ones through bincounts."""
    if plan is not None and len(data) >= EXACT_CHUNK:
        return exact_counts(plan, data.codes) / len(data)
    return answer(data, w) if isinstance(w, Workload) else w.answer(data)


def workload_facts(q, w) -> dict:
    if isinstance(w, Workload):
        return {"kind": "marginals", "k": q.k, "num_marginals": len(w.marginals), "num_queries": w.num_queries}
    return {"kind": "census", "tables": q.tables, "num_queries": w.num_queries,
            "cells_per_table": dict(w.cells_per_table)}


def build_priors(pop: Dataset, cfg: ExperimentConfig, prob: UnitProblem) -> dict:
    """The holdout prior, the chance prior and the geographic priors the config's baselines and inits need."""
    dom = prob.private.domain
    priors: dict = {"holdout": EmpiricalPrior(dom, prob.holdout.codes),
                    "chance": ChancePrior.from_data(prob.private)}  # one-way margins of D: published
    geo_levels = [b for b in {*cfg.baselines.methods, *cfg.attack.init} if b not in ("holdout", "random", "chance")]
    if geo_levels:
        priors.update(
            geographic_priors(
                pop, cfg.target.level, prob.unit, attributes(cfg, pop),
                block_domain=dom if prob.with_block else None,
                block_weights=prob.block_weights,
                levels=sorted(geo_levels),
                include_target=cfg.baselines.include_target,
            )
        )
    return priors


def unit_settings(cfg: ExperimentConfig, prob: UnitProblem, init: str) -> RAPSettings:
    """RAP settings of one unit's attack: the config's, with n' = |D_holdout| for the paper's
    each-once initialisation and the draws per run resolved (``n`` = the persons of D, which
    the attacker reads off the published total)."""
    a = cfg.attack
    over = {"init_mode": a.init_mode if init != "random" else "resample"}
    if init != "random" and a.init_mode == "each_once":
        over["rows"] = len(prob.holdout)
    if a.draws_per_run is not None:
        over["draws"] = len(prob.private) if a.draws_per_run == "n" else int(a.draws_per_run)
    return rap_settings(cfg, **over)


def init_pool(cfg: ExperimentConfig, prob: UnitProblem, prior, init: str, rows: int) -> np.ndarray:
    """The rows a unit's runs start from: a large sample of the prior to draw from per run
    (``init_mode: resample``), or exactly n' rows used once each (``each_once``: D_holdout
    itself for the holdout init, else n' rows drawn from the prior once for the unit)."""
    rng = np.random.default_rng(_stable("pool", cfg.seed, prob.unit, init))
    if cfg.attack.init_mode == "each_once":
        return prob.holdout.codes if init == "holdout" else prior.sample(rows, rng)
    return prior.sample(_INIT_POOL_ROWS, rng)


def rap_settings(cfg: ExperimentConfig, **over) -> RAPSettings:
    a = cfg.attack
    kw = dict(rows=a.rows, steps=a.steps, learning_rate=a.learning_rate, sampling=a.sampling,
              queries_per_step=a.queries_per_step, init_confidence=a.init_confidence,
              steps_per_call=a.steps_per_call, batch=a.batch, precision=a.precision)
    kw.update(over)
    return RAPSettings(**kw)


COLUMNS = ["variant", "unit", "method", "threshold", "k", "k_over_u", "num_candidates", "num_matched",
           "match_rate", "union_size", "u", "n_rows", "num_queries", "num_matched_unique", "num_matched_common",
           *OUTSIDE_COLUMNS]


def run_experiment(cfg: ExperimentConfig, out_root: str | Path = "results", progress: bool = True) -> Path:
    """Run ``cfg``; write results/<name>/<hash>/ and return that directory.

    Each finished unit is saved atomically under ``units/`` first, so an interrupted run
    leaves no half-written file and a rerun of the same config resumes where it stopped.
    """
    t_start = time.perf_counter()
    pop = load_population(cfg)  # fail on bad data before anything is written
    units = select_units(pop, cfg)
    run_dir = Path(out_root) / cfg.name / cfg.digest()
    units_dir = run_dir / "units"
    units_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(run_dir / "config.yaml", cfg.model_dump(mode="json"))
    log.info("attacking %d %ss: %s", len(units), cfg.target.level, units)
    fingerprint = code_fingerprint()
    tasks = [(wb, u) for wb in cfg.target.with_block for u in units]
    unit_bar = tqdm(total=len(tasks), desc="units", disable=not progress, unit="unit")
    runs_bar = tqdm(total=cfg.attack.runs, desc="K runs", disable=not progress, leave=False, unit="run")
    group = units_per_call(cfg, pop)
    done: dict[tuple[bool, str], tuple[pd.DataFrame, dict]] = {}
    pending: list[tuple[bool, str]] = []

    def paths(wb: bool, u: str) -> tuple[Path, Path]:
        stem = f"{'block' if wb else 'noblock'}_{u}"
        return units_dir / f"{stem}.parquet", units_dir / f"{stem}.json"

    for wb, u in tasks:
        pq_path, js_path = paths(wb, u)
        if pq_path.exists() and js_path.exists():
            saved = json.loads(js_path.read_text())
            if saved.get("code_fingerprint") == fingerprint:
                done[(wb, u)] = (pd.read_parquet(pq_path), saved)
                continue
            log.warning("unit %s was computed by other code (%s); recomputing", pq_path.stem, saved.get("code_fingerprint"))
        pending.append((wb, u))
    unit_bar.update(len(done))
    try:
        for start in range(0, len(pending), group):
            chunk = pending[start:start + group]
            unit_bar.set_postfix_str(", ".join(f"{u} {'with' if wb else 'without'} BLOCK" for wb, u in chunk[:3])
                                     + (" ..." if len(chunk) > 3 else ""))
            results = run_units(pop, cfg, [(u, wb) for wb, u in chunk], runs_bar=runs_bar if progress else None)
            for (wb, u), (df, f) in zip(chunk, results):
                f["code_fingerprint"] = fingerprint
                df = df.reindex(columns=COLUMNS)
                pq_path, js_path = paths(wb, u)
                write_parquet(pq_path, df)
                write_json(js_path, f)
                done[(wb, u)] = (df, f)
            unit_bar.update(len(chunk))
        frames = [done[t][0] for t in tasks]
        facts = [done[t][1] for t in tasks]
    finally:
        runs_bar.close()
        unit_bar.close()

    result = pd.concat(frames, ignore_index=True)
    write_parquet(run_dir / "match_rate.parquet", result)
    write_parquet(run_dir / "lift.parquet", lift_by_baseline(result))
    write_parquet(run_dir / "persons.parquet", persons_reconstructed(result))
    calib = pd.DataFrame([dict(c, unit=f["unit"], variant=f["with_block"]) for f in facts for c in f["calibration"]])
    write_parquet(run_dir / "calibration.parquet", calib)
    conc = pd.DataFrame([dict(f["concentration"], unit=f["unit"], variant=f["with_block"], u=f["u"], rows=f["rows"])
                         for f in facts])
    write_parquet(run_dir / "units.parquet", conc)
    plot_run(run_dir, cfg)
    manifest = {
        "name": cfg.name,
        "config_hash": cfg.digest(),
        "code_fingerprint": fingerprint,
        "versions": versions(),
        "jax": jax_info(),
        "seeds": {"experiment": cfg.seed, "population": cfg.data.seed},
        "population_rows": len(pop),
        "rarity_level": rarity_level(pop.geography, cfg.target.level) if len(pop.geography.coarser(cfg.target.level)) > 1 else None,
        "units": facts,
        "seconds_total": round(time.perf_counter() - t_start, 2),
    }
    write_json(run_dir / "manifest.json", manifest)
    return run_dir


def _title(cfg: ExperimentConfig) -> str:
    a = cfg.attack
    def describe(q):
        if q.kind == "census":
            return f"census tables ({q.label})"
        return f"{q.k}-way marginals" if q.max_marginals is None else f"{q.max_marginals} {q.k}-way marginals"

    qs = " and ".join(describe(q) for q in cfg.queries)
    return f"{cfg.name}: {cfg.target.level}s, {qs}, K={a.runs}, T={a.steps}, n'={a.rows}"


def plot_run(run_dir: Path, cfg: ExperimentConfig) -> list[Path]:
    """Draw every plot of a run from its Parquet files."""
    df = pd.read_parquet(run_dir / "match_rate.parquet")
    paths = plot_match_rate(df, run_dir / "match_rate", title=_title(cfg), points=cfg.grid_points)
    calib_path = run_dir / "calibration.parquet"
    calib = pd.read_parquet(calib_path) if calib_path.exists() else pd.DataFrame()
    paths += plot_metrics(df, calib, run_dir / "metrics", title=_title(cfg))
    return paths


def replot(run_dir: str | Path) -> list[Path]:
    """Regenerate the plots of a finished run from its Parquet."""
    import yaml

    from experiments.config import parse_config

    run_dir = Path(run_dir)
    if not (run_dir / "match_rate.parquet").exists():
        raise ConfigError(f"{run_dir} has no match_rate.parquet; is it a finished run directory?")
    cfg = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()), str(run_dir / "config.yaml"))
    return plot_run(run_dir, cfg)
