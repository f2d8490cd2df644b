"""Run one experiment config end to end: units, split, queries, RAP-Rank, baselines, metrics, files."""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from censusrecon.reconstruct import attacks
from censusrecon.reconstruct.attacks import AttackInputs, attack_unit, attack_units, is_attack
from censusrecon.experiments.config import ConfigError, ExperimentConfig, parse_config
from censusrecon.experiments.metrics import (BLOCK_SIZE_COLUMNS, OUTSIDE_COLUMNS, UNIQUE_BY_BLOCK_SIZE_COLUMNS, best_baselines,
                                 calibration, concentration, effective_u, k_grid, lift_by_baseline,
                                 match_rate_curve, persons_reconstructed, strength_by_runs, unique_persons)
from censusrecon.experiments.plots import plot_match_rate, plot_metrics
from censusrecon.experiments.progress import UnitProgress
from censusrecon.experiments.results import (Hooks, UnitStore, UnitTask, code_fingerprint, finish, jax_info, results_kind, run_seconds, versions, write_json,
                                 write_parquet, write_yaml)
from censusrecon.experiments.problem import (Study, UnitProblem, stable_seed, baseline_curves, build_workload, exact_answers,
                                 rap_settings, rarity_level, resolve, unit_key, workload_facts)
from censusrecon.microdata.geography import plural
from censusrecon.microdata.marginals import Workload
from censusrecon.reconstruct.queries import plan_for
from censusrecon.reconstruct.rap import default_batch

log = logging.getLogger(__name__)

def run_unit(study: Study, unit: str, with_block: bool,
             runs_bar: tqdm | None = None, only: set[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """Attack one unit with every configured method (or those in ``only``; ``"baselines"``
    stands for all baselines); returns its curve rows and its facts."""
    return run_units(study, [(unit, with_block)], runs_bar, only)[0]


@dataclass
class UnitWork:
    """One unit's attack under way: its problem, its rows' keys, u and the k grid, its workloads (label → (queries,
    workload, plan, answers)), the baselines' priors, the persons outside it and its blocks' size classes (for the
    curves); and what its attacks gave so far: curves, seconds, RAP-Rank's facts, calibration, strength (persons
    reconstructed by the first k of the K runs) and rankings ((workload label, method) → ranking, for the exact
    attack)."""

    prob: UnitProblem
    truth: np.ndarray
    u: int
    ks: np.ndarray
    workloads: dict
    priors: dict
    outside: tuple[np.ndarray, np.ndarray] | None
    block_class: tuple[np.ndarray, np.ndarray] | None = None
    frames: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    rap_facts: dict = field(default_factory=dict)
    calib: list = field(default_factory=list)
    strength: list = field(default_factory=list)
    rankings: dict = field(default_factory=dict)


def run_units(study: Study, tasks: list[tuple[str, bool]],
              runs_bar: tqdm | None = None, only: set[str] | None = None,
              prepared: "Prefetch | None" = None) -> list[tuple[pd.DataFrame, dict]]:
    """Attack several units at once: for each RAP method, the units whose workloads share one
    evaluation plan (same domain and queries) are fitted by :func:`rap_rank_units` in shared
    compiled calls. Each unit's result is what :func:`run_unit` gives it alone. ``prepared``: units
    prepared ahead (:class:`Prefetch`), the others here."""
    cfg = study.cfg
    work = [_unit_work(study, unit, wb) if prepared is None else prepared.take(unit, wb) for unit, wb in tasks]
    on_tables = attacks.on_tables(cfg, only)  # the exact attack: it compares RAP-Rank's rankings to its rows
    for q, init in itertools.product(cfg.queries, cfg.attack.init):
        name = cfg.rap_method(q, init)
        if only is None or name in only:
            _rap_rank(study, work, q, init, name, runs_bar, bool(on_tables))
    for method in cfg.attack.methods:  # the other attacks, through the same call: they read the published answers only
        for q in cfg.queries:
            name = cfg.unit_method(method, q)
            if only is None or name in only:
                _unit_attack(cfg, work, method, q, name)
    return [_unit_result(cfg, w, only, on_tables) for w in work]


class Prefetch:
    """Units prepared in a thread while the attacks of the units before them run: a unit's preparation (its data,
    its tables' workload, their exact answers, its priors) is host work, and on a GPU as long as its fits. Each unit
    is prepared as :func:`_unit_work` prepares it; what was not asked ahead is prepared when taken, and an error of
    a preparation is raised where the unit is taken."""

    def __init__(self, study: Study):
        from concurrent.futures import ThreadPoolExecutor

        self.study, self.pool, self.ahead = study, ThreadPoolExecutor(1, thread_name_prefix="prepare"), {}

    def start(self, tasks) -> None:
        for t in tasks:
            if (t.unit, t.with_block) not in self.ahead:
                self.ahead[(t.unit, t.with_block)] = self.pool.submit(_unit_work, self.study, t.unit, t.with_block)

    def take(self, unit: str, wb: bool) -> UnitWork:
        ahead = self.ahead.pop((unit, wb), None)
        return _unit_work(self.study, unit, wb) if ahead is None else ahead.result()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _unit_work(study: Study, unit: str, wb: bool) -> UnitWork:
    """A unit's problem prepared for its attacks: Q(D) of every workload is all the attacks see of D."""
    prob = study.prepare(unit, wb)
    D, H = prob.private, prob.holdout
    u = effective_u(D.distinct(), H.distinct())
    workloads = {}
    for q in study.cfg.queries:
        w = study.workload(q, D.domain, prob.areas)
        plan = plan_for(w)
        workloads[q.label] = (q, w, plan, exact_answers(D, w, plan))
    return UnitWork(prob, D.keys(), u, k_grid(u, study.cfg.grid_points), workloads, study.priors(prob),
                    study.outside_counts(prob), study.block_classes(prob))


def _ties(cfg: ExperimentConfig, w: UnitWork, method: str) -> np.random.Generator:
    """The generator that breaks a method's ties on a unit: per method, so that a sweep task matches the full run."""
    return np.random.default_rng(stable_seed("ties", cfg.seed, w.prob.unit, w.prob.with_block, method))


def _rap_rank(study: Study, work: list[UnitWork], q, init: str, name: str, runs_bar, on_tables: bool) -> None:
    """RAP-Rank ``name`` (workload ``q``, started from ``init``) on every unit, the units that share a plan and
    settings in shared compiled calls; ``on_tables``: an attack on the tables will read its rankings (ranked as deep
    as D has persons)."""
    cfg, a = study.cfg, study.cfg.attack
    groups: dict = {}  # (plan, settings) -> indices of the units that share compiled calls
    for i, w in enumerate(work):
        if init != "random" and init not in w.priors:
            log.warning("unit %s: no data for init %s (nothing outside the unit at that level); skipped",
                        w.prob.unit, init)
            continue
        groups.setdefault((w.workloads[q.label][2], study.unit_settings(w.prob, init)), []).append(i)
    rap = attacks.attack(attacks.RAP_RANK)
    for (plan, settings), idx in groups.items():
        members = [work[i] for i in idx]
        pools = None
        if init != "random":
            pools = [study.init_pool(m.prob, m.priors[init], init, settings.rows) for m in members]
        if runs_bar is not None:
            runs_bar.reset(total=a.runs * len(members))
            runs_bar.set_description(f"{name} K runs" + (f" x {len(members)} units" if len(members) > 1 else ""))
        inputs = [AttackInputs(m.workloads[q.label][1], m.workloads[q.label][3], _ties(cfg, m, name),
                               int(max(m.ks.max(), len(m.prob.private) if on_tables else 0)),
                               key=unit_key(cfg, "rap", m.prob.unit, m.prob.with_block, init, q.label),
                               runs=a.runs, settings=settings, init_pool=None if pools is None else pools[j],
                               plan=plan) for j, m in enumerate(members)]
        for m, got in zip(members, attack_units(rap, inputs, runs_bar.update if runs_bar is not None else None)):
            res = got.fit
            workload = m.workloads[q.label][1]
            m.timings[name] = round(res.seconds, 3)
            m.rap_facts[name] = {"mean_final_loss": float(res.final_loss.mean()),
                                 "mean_max_abs_error": float(res.max_abs_error.mean()),
                                 "distinct_candidates": int(res.union_size),
                                 "rows_per_run": int(res.codes.shape[1]), "relaxed_rows": settings.rows,
                                 "units_in_call": len(members), "kernel": res.kernel}
            m.frames.append(match_rate_curve(got.ranking, m.truth, m.ks, m.u, got.candidates, m.outside,
                                             m.block_class).assign(method=name, num_queries=workload.num_queries))
            m.calib += calibration(*res.run_fractions(), m.truth, a.runs).assign(method=name).to_dict("records")
            m.strength += [dict(r, method=name) for r in strength_by_runs(
                res.codes, m.prob.private.domain.encode, m.truth, m.u, stable_seed("strength", cfg.seed),
                got.ranking)]
            m.rankings[(q.label, name)] = got.ranking


def _unit_attack(cfg: ExperimentConfig, work: list[UnitWork], method: str, q, name: str) -> None:
    """An attack run unit by unit (``attack.methods``) on every unit's published answers of workload ``q``."""
    kind = attacks.attack(method)
    for w in work:
        t0 = time.perf_counter()
        _, workload, _, answers = w.workloads[q.label]
        got = attack_unit(kind, AttackInputs(workload, answers, _ties(cfg, w, name), int(w.ks.max())))
        w.frames.append(match_rate_curve(got.ranking, w.truth, w.ks, w.u, got.candidates, w.outside,
                                         w.block_class).assign(method=name, num_queries=workload.num_queries))
        w.timings[name] = round(time.perf_counter() - t0, 3)


def _unit_result(cfg: ExperimentConfig, w: UnitWork, only: set[str] | None, on_tables: list) -> tuple[pd.DataFrame, dict]:
    """A unit's curves and facts: its attacks' so far, its baselines', then the attacks on its tables."""
    D, H = w.prob.private, w.prob.holdout
    if only is None or "baselines" in only:
        for b, curve, seconds in baseline_curves(cfg, w.priors, w.prob.unit, w, lambda b: _ties(cfg, w, b)):
            w.timings[b] = seconds
            w.frames.append(curve.assign(method=b, num_queries=0))
    tables_facts: dict = {}
    for kind in on_tables:  # after the baselines: the exact attack compares the best one's ranking with its rows
        tables_facts.update(kind.on_tables(cfg, w))
    df = pd.concat(w.frames, ignore_index=True)
    df = df.assign(variant=w.prob.with_block, unit=w.prob.unit, u=w.u, n_rows=len(D), n_unique=unique_persons(D))
    facts = {
        "unit": w.prob.unit, "with_block": w.prob.with_block, "rows": len(D), "holdout_rows": len(H),
        "distinct_rows": D.distinct(), "holdout_distinct_rows": H.distinct(), "u": w.u,
        "workloads": {label: workload_facts(q, wl) for label, (q, wl, _, _) in w.workloads.items()},
        "domain": dict(zip(D.domain.names, D.domain.sizes)), "seconds": w.timings, "rap": w.rap_facts,
        "concentration": concentration(w.truth), "calibration": w.calib, "strength": w.strength,
    }
    facts.update(tables_facts)
    return df, facts


def exact_attack(cfg: ExperimentConfig, w: UnitWork) -> dict:
    """The exact attack on each tables workload of one unit (the registry's ``exact``, its ``on_tables``), after its
    other attacks and baselines (``w.frames``, whose best baseline it compares with, and ``w.rankings``, RAP-Rank's,
    whose rows it certifies): its curves join ``w.frames``, its seconds ``w.timings``; returns the unit's facts of it
    (per workload, agreement, reidentification rows)."""
    frames, rankings, timings = w.frames, w.rankings, w.timings
    from censusrecon.experiments.exact_eval import evaluate_exact

    facts, agree, reid = {}, [], []
    so_far = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    base_rankings = {}
    if len(so_far):
        top = so_far[so_far["k"] == w.u].assign(unit=w.prob.unit)
        best = best_baselines(top, ~top["method"].map(is_attack), ["unit"])
        if len(best):
            b = best["method"].iloc[0]
            base_rankings[b] = w.priors[b].ranking(rng=_ties(cfg, w, b), limit=len(w.prob.private))
    for q in cfg.queries:
        if not q.is_tables:
            continue
        workload = w.workloads[q.label][1]
        mine = {name: r for (label, name), r in rankings.items() if label == q.label}
        rng = np.random.default_rng(stable_seed("reid", cfg.seed, w.prob.unit, w.prob.with_block, q.label))
        t0 = time.perf_counter()
        curves, f, a_rows, r_rows = evaluate_exact(cfg, w, workload, mine, base_rankings, rng, q.label)
        timings[f"exact_{q.label}"] = round(time.perf_counter() - t0, 3)
        frames += [c.assign(num_queries=workload.num_queries) for c in curves]
        facts[q.label] = f
        agree += [dict(x, workload=q.label) for x in a_rows]
        reid += [dict(x, workload=q.label) for x in r_rows]
    return {"exact": facts, "agreement": agree, "reidentification": reid}


attacks.implement(attacks.EXACT_ATTACK, on_tables=exact_attack)


def units_per_call(study: Study) -> int:
    """How many units to attack together: enough to fill one compiled batch of (unit, run)
    pairs when K alone does not (on a GPU, thousands of pairs per call), capped so that a crash
    loses at most that many units' work. Sized for the largest configured workload, over the
    person attributes (with BLOCK a census workload adds per-block queries whose count varies by
    unit; the cap bounds what that can add)."""
    cfg = study.cfg
    dom = study.pop.project(list(study.attributes)).domain
    settings = rap_settings(cfg)
    batch = min(default_batch(settings, 1 << 20, plan_for(build_workload(cfg, q, dom))) for q in cfg.queries)
    return int(min(64, max(1, -(-batch // cfg.attack.runs))))


def unit_queries(cfg: ExperimentConfig) -> list[dict]:
    """Per target unit (and BLOCK variant): blocks, distinct queries, and cells per table asked for.
    A listed unit nobody lives in is a row of its own (``empty``: every table zero, not attacked),
    as evaluate-release reports it."""
    study = resolve(cfg)
    pop, units, empty = study.pop, study.units, study.empty_units
    out = []
    for wb in cfg.target.with_block:
        out += [{"unit": u, "with_block": wb, "empty": True, "num_blocks": None, "occupied_blocks": 0,
                 "num_queries": None, "cells_per_table": {}} for u in empty]
        for unit in units:
            prob = study.prepare(unit, wb, pad_blocks=False)  # what is published, not the padding
            rows = np.flatnonzero(pop.geography.mask(cfg.target.level, unit))
            has_blocks = "block" in pop.geography.finer(cfg.target.level)
            blocks, source = study.blocks(unit) if has_blocks else ([], None)
            occupied = len(set(pop.geography.units("block")[rows].tolist())) if has_blocks else 0
            for q in cfg.queries:
                w = study.workload(q, prob.private.domain, prob.areas)
                cells = (dict(w.cells_per_table) if not isinstance(w, Workload)
                         else {"×".join(m): int(np.prod(w.shape(m))) for m in w.marginals})
                out.append({"unit": unit, "with_block": wb, "empty": False, "workload": q.label, "num_blocks": len(blocks),
                            "occupied_blocks": occupied, "block_list": source,
                            "num_queries": w.num_queries, "cells_per_table": cells})
    return out


COLUMNS = ["variant", "unit", "method", "threshold", "k", "k_over_u", "num_candidates", "num_matched",
           "match_rate", "union_size", "u", "n_rows", "n_unique", "num_queries", "num_matched_unique", "num_matched_common",
           *OUTSIDE_COLUMNS, *BLOCK_SIZE_COLUMNS, *UNIQUE_BY_BLOCK_SIZE_COLUMNS]


def run_experiment(cfg: ExperimentConfig, out_root: str | Path = "results", progress: bool = True) -> Path:
    """Run ``cfg``; write results/<name>/<hash>/ and return that directory.

    Each finished unit is saved atomically under ``units/`` first, so an interrupted run
    leaves no half-written file and a rerun of the same config resumes where it stopped.
    """
    t_start = time.perf_counter()
    study = resolve(cfg)  # fail on bad data before anything is written
    pop, units, empty = study.pop, study.units, study.empty_units
    run_dir = Path(out_root) / cfg.name / cfg.digest()
    units_dir = run_dir / "units"
    units_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(run_dir / "config.yaml", cfg.model_dump(mode="json"))
    log.info("attacking %d %s: %s", len(units), plural(cfg.target.level), units)
    fingerprint = code_fingerprint()
    tasks = [UnitTask(u, wb) for wb in cfg.target.with_block for u in units]
    unit_bar = UnitProgress(len(tasks), "units", progress)
    runs_bar = tqdm(total=cfg.attack.runs, desc="K runs", disable=not unit_bar.tty, leave=False, unit="run")
    store = UnitStore(run_dir, fingerprint)
    prefetch = Prefetch(study)  # the next chunk's units prepared while a chunk's attacks run

    def compute(chunk: list[UnitTask]) -> list[dict]:  # units of a chunk share compiled calls, and its time
        t_chunk = time.perf_counter()
        results = run_units(study, [(t.unit, t.with_block) for t in chunk], runs_bar=runs_bar if unit_bar.tty else None,
                            prepared=prefetch)
        each = round((time.perf_counter() - t_chunk) / max(len(chunk), 1), 2)
        return [store.save(t, df.reindex(columns=COLUMNS), {**f, "seconds_unit": each})
                for t, (df, f) in zip(chunk, results)]

    def start(chunk: list[UnitTask]) -> None:
        unit_bar.postfix(", ".join(t.label for t in chunk[:3]) + (" ..." if len(chunk) > 3 else ""))

    try:
        results, computed = finish(store, tasks, compute, group=units_per_call(study),
                                   hooks=Hooks(on_found=lambda n: unit_bar.found(n, run_dir), on_start=start,
                                               on_next=prefetch.start, on_done=lambda t: unit_bar.update(1, t.label)))
    except KeyboardInterrupt:
        raise unit_bar.interrupted() from None
    finally:
        prefetch.close()
        runs_bar.close()
        unit_bar.close()
    frames = [results[t]["curves"] for t in tasks]
    facts = [{k: v for k, v in results[t].items() if k not in ("curves", "micro_rows")} for t in tasks]
    result = pd.concat(frames, ignore_index=True)
    write_parquet(run_dir / "match_rate.parquet", result)
    write_parquet(run_dir / "lift.parquet", lift_by_baseline(result))
    write_parquet(run_dir / "persons.parquet", persons_reconstructed(result))
    calib = pd.DataFrame([dict(c, unit=f["unit"], variant=f["with_block"]) for f in facts for c in f["calibration"]])
    write_parquet(run_dir / "calibration.parquet", calib)
    strength = pd.DataFrame([dict(x, unit=f["unit"], variant=f["with_block"]) for f in facts
                             for x in f.get("strength", [])])
    if len(strength):
        write_parquet(run_dir / "strength.parquet", strength)
    conc = pd.DataFrame([dict(f["concentration"], unit=f["unit"], variant=f["with_block"], u=f["u"], rows=f["rows"])
                         for f in facts])
    write_parquet(run_dir / "units.parquet", conc)
    if cfg.attack.exact:
        for key, name in (("agreement", "agreement.parquet"), ("reidentification", "reid.parquet")):
            rows = [dict(x, unit=f["unit"], variant=f["with_block"]) for f in facts for x in f.get(key, [])]
            if rows:
                write_parquet(run_dir / name, pd.DataFrame(rows))
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
        "empty_units": empty,  # named, listed, nobody lives there: not attacked
        **run_seconds(time.perf_counter() - t_start, [f for t, f in zip(tasks, facts) if t not in computed]),
    }
    write_json(run_dir / "manifest.json", manifest)
    return run_dir


def _title(cfg: ExperimentConfig) -> str:
    a = cfg.attack
    qs = " and ".join(q.describe() if len(q.describe()) < 60 else q.label for q in cfg.queries)
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


    run_dir = Path(run_dir)
    kind = results_kind(run_dir)
    if kind == "sweep":
        raise ConfigError(f"{run_dir} holds a sweep: censusrecon report draws its plot (bureau.png, with exact tasks) "
                          "and writes its report")
    release = kind == "release"
    cfg = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()), str(run_dir / "config.yaml"))
    if release:
        from censusrecon.experiments.release.release_plots import replot_release

        return replot_release(run_dir, cfg)
    return plot_run(run_dir, cfg)
