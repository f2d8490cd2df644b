"""Evaluate DP releases before publishing: release at each ε, attack the release, compare, audit, report."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from experiments.config import ConfigError, ExperimentConfig
from experiments.metrics import MARGINS_ATTACK, effective_u, k_grid, match_rate_curve, unique_persons
from experiments.progress import UnitProgress
from experiments.problem import (_stable, attributes, baseline_curves, build_priors, build_workload, exact_answers,
                                 load_population, prepare_unit, rap_settings, select_units, unit_blocks, unit_key)
from experiments.release_report import plot_release, release_persons, unit_selection, write_report
from experiments.results import code_fingerprint, jax_info, versions, write_json, write_parquet, write_yaml
from microdata.dataset import Dataset
from microdata.geography import FROM_ROWS
from microdata.marginals import Workload, marginal_counts
from reconstruct.margins import margins_attack
from reconstruct.queries import plan_for
from microdata.ranking import rank_by_score
from reconstruct.rap import rap_rank
from synth.histogram import DENSE_LIMIT, SparseHistogram, perturbed_histogram, smoothed_histogram
from synth.mechanism import Ledger, Mechanism, PrivacyError, Relation, parse_relation
from synth.noise import SimulationNoise, make_backend
from synth.release import (TOTAL_PUBLIC_BY_RELATION, estimate_total, fit_synthetic, laplace_tables, table_utility,
                           total_queries, totals_utility, workload_counts)
from synth.swapping import NOT_DP, swap_records
from synth.topdown import Tree
from synth.topdown import estimate as topdown_estimate
from synth.topdown import measure as topdown_measure

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
    facts: dict = field(default_factory=dict)
    rows: Dataset | None = None  # the microdata published, when the release publishes rows


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
                         workload_counts(synth, workload).astype(np.float64), rows=synth)
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
                         counts, rows=drawn)
    raise ConfigError(f"unknown mechanism {mechanism!r}")


def publish_swapping(cfg: ExperimentConfig, rate: float, D: Dataset, workload, rng: np.random.Generator) -> Published:
    """Swap about ``rate`` of D's records between its blocks and publish the swapped file's exact
    tables (consistent, integer, and not differentially private)."""
    swapped, facts = swap_records(D, rate, rng, list(cfg.release.swap_match))
    pub = Published("swapping", None, swapped, exact_answers(swapped, workload), ("tables", _labels(workload)),
                    False, NOT_DP, workload_counts(swapped, workload).astype(np.float64), rows=swapped)
    pub.facts = facts
    return pub


@dataclass
class TopDownRoot:
    """One TopDown release's inputs: the tree under a root, the person-level tables measured at every
    level, and where each target unit's blocks and unit sit in it."""

    root: str
    tree: Tree
    person_workload: object
    cells_per_person: int
    nodes: dict  # unit -> (unit level index, its node, {block value: block node})


def topdown_root(cfg: ExperimentConfig, pop: Dataset, unit: str, with_block: bool) -> TopDownRoot:
    """The tree a TopDown release of ``unit`` runs over: the unit's ancestor at ``release.topdown.root``,
    every unit of the target level inside it (each its private half D: the holdouts stay out of every
    release), their blocks from the public list when BLOCK is kept, and the levels between."""
    geo = pop.geography
    level, root_level = cfg.target.level, cfg.release.topdown.root
    if root_level not in geo.coarser(level):
        raise ConfigError(f"release.topdown.root {root_level!r} must be coarser than the target level {level!r}; "
                          f"choose from {list(geo.coarser(level))}")
    root = geo.parent(level, unit, root_level)
    mids = [lv for lv in reversed(geo.coarser(level)) if lv in geo.finer(root_level)]  # coarsest first
    units = sorted(set(geo.units(level)[geo.units(root_level) == root].tolist()))
    units = [u for u in units if int(geo.mask(level, u).sum()) >= 2]
    probs = {u: prepare_unit(pop, cfg, u, with_block, pad_blocks=False) for u in units}
    first = probs[unit].private
    person_domain = first.domain.project([a for a in first.domain.names if a != "BLOCK"])
    pw = build_workload(cfg, cfg.queries[0], person_domain)
    levels = [root_level, *mids, level] + (["block"] if with_block else [])
    ids = [[root]] + [[] for _ in levels[1:]]
    parent = [np.array([-1])] + [[] for _ in levels[1:]]
    counts = [None] * len(levels)
    leaf_counts, nodes = {}, {}
    u_level = 1 + len(mids)
    for u in units:
        # the unit's chain of ancestors between root and unit
        chain = [geo.parent(level, u, lv) for lv in mids]
        par = 0
        for li, node in enumerate(chain, start=1):
            if node not in ids[li]:
                ids[li].append(node)
                parent[li].append(par)
            par = ids[li].index(node)
        ids[u_level].append(u)
        parent[u_level].append(par)
        D = probs[u].private
        people = D.project(list(person_domain.names))
        leaf_counts[u] = pw.counts(people)
        blocks = {}
        if with_block:
            b = D.column("BLOCK")
            for v in range(D.domain.size("BLOCK")):
                ids[-1].append(f"{u}/{D.domain.attribute('BLOCK').values[v]}")
                parent[-1].append(len(ids[u_level]) - 1)
                blocks[v] = len(ids[-1]) - 1
                leaf_counts[(u, v)] = pw.counts(people.take(np.flatnonzero(b == v)))
        nodes[u] = (u_level, len(ids[u_level]) - 1, blocks)
    nq = pw.num_queries
    counts[u_level] = np.stack([leaf_counts[u] for u in ids[u_level]])
    if with_block:
        counts[-1] = np.stack([leaf_counts[(u, v)] for u in ids[u_level] for v in sorted(nodes[u][2])])
    for li in range(u_level - 1, -1, -1):  # sums up the tree
        agg = np.zeros((len(ids[li]), nq), dtype=np.int64)
        np.add.at(agg, np.asarray(parent[li + 1]), counts[li + 1])
        counts[li] = agg
    tree = Tree(levels, [np.array(x) for x in ids], [np.asarray(x) for x in parent], counts, pw.everyone_queries())
    return TopDownRoot(root, tree, pw, pw.max_cells_per_person(), nodes)


def publish_topdown(cfg: ExperimentConfig, td: TopDownRoot, epsilon: float, backend, runs: int | None = None):
    """TopDown over ``td``'s tree: noisy measurements at every level (the private step), then the
    top-down estimates (post-processing). Returns (noisy per level, estimates per level or None for a
    batch of runs, the mechanism)."""
    r = cfg.release
    noisy, mech = topdown_measure(td.tree, epsilon, backend, r.relation, td.cells_per_person, r.topdown.shares,
                                  runs=runs, invariants=tuple(i for i in r.invariants if i == "root_total"))
    return noisy, (None if runs is not None else topdown_estimate(td.tree, noisy)), mech


def topdown_unit(td: TopDownRoot, estimates: list[np.ndarray], unit: str, workload, mech, ok, note) -> Published:
    """One target unit's published tables out of a TopDown release: block tables from the block
    estimates, unit tables from the unit's."""
    u_level, node, blocks = td.nodes[unit]
    pw = td.person_workload
    index = {tuple(pw.value_sets[j][q[j]] for j in range(len(pw.domain))): i for i, q in enumerate(pw.queries)}
    names = list(workload.domain.names)
    jb = names.index("BLOCK") if "BLOCK" in names else None
    full_block = frozenset(range(workload.domain.size("BLOCK"))) if jb is not None else None
    counts = np.zeros(workload.num_queries, dtype=np.float64)
    for i, q in enumerate(workload.queries):
        sets = tuple(workload.value_sets[j][q[j]] for j in range(len(names)) if j != jb)
        p = index[sets]
        if jb is not None and workload.value_sets[jb][q[jb]] != full_block:
            (b,) = workload.value_sets[jb][q[jb]]
            counts[i] = estimates[-1][blocks[b], p]
        else:
            counts[i] = estimates[u_level][node, p]
    total = max(estimate_total(workload, counts.astype(np.int64)), 1)
    answers = np.clip(counts, 0, None) / total
    return Published("topdown", mech, estimates, answers, ("tables", _labels(workload)), ok, note, counts)


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
    if cfg.baselines.include_target:
        raise ConfigError("baselines.include_target: true builds the geographic baselines partly from D itself (the "
                          "paper's pools); a release verdict compares with what an outsider has without the release, "
                          "so evaluate-release needs include_target: false")
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
    per_unit = 1 + sum(len(r.settings(m)) for m in r.mechanisms)
    topdown_cache: dict = {}  # "trees": (unit, BLOCK?) -> tree of its root; "releases": (root, BLOCK?, ε) -> release
    exact_statuses: list = []
    micro: list[pd.DataFrame] = []  # per unit: D, D_holdout and every published microdata file
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
                if stem.with_suffix(".micro.parquet").exists():
                    micro.append(pd.read_parquet(stem.with_suffix(".micro.parquet")))
                utility.extend(facts["utility"])
                ledger.entries.extend(facts["ledger"])
                exact_statuses.extend(facts.get("exact_attack", []))
                bar.update(per_unit)
                found += 1
                continue
            if found:
                units_bar.found(found, run_dir)
                found = 0
            n_ledger = len(ledger.entries)
            unit_curves, unit_util, unit_exact, unit_micro = _evaluate_unit(cfg, pop, unit, wb, ledger, bar,
                                                                            topdown_cache)
            write_parquet(stem.with_suffix(".parquet"), unit_curves)
            if unit_micro is not None:  # before the JSON: a unit counts as done only with all its files
                write_parquet(stem.with_suffix(".micro.parquet"), unit_micro)
                micro.append(unit_micro)
            write_json(saved, {"code_fingerprint": fingerprint, "utility": unit_util, "exact_attack": unit_exact,
                               "ledger": ledger.entries[n_ledger:]})
            exact_statuses.extend(unit_exact)
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
    risks, risk_note = measure_risks(cfg, micro)
    write_json(run_dir / "risks.json", {"note": risk_note})
    if len(risks):
        write_parquet(run_dir / "risks.parquet", risks)
    elif (run_dir / "risks.parquet").exists():
        (run_dir / "risks.parquet").unlink()
    write_parquet(run_dir / "release_eval.parquet", df)
    write_parquet(run_dir / "utility.parquet", util)
    write_parquet(run_dir / "lift.parquet", lift)
    write_json(run_dir / "ledger.json", {"entries": ledger.entries, "relation": r.relation,
                                         "invariants": list(r.invariants),
                                         "unit_selection": unit_selection(cfg),
                                         "total_epsilon_per_unit": {u: ledger.total_epsilon(unit=u) for u in units}})
    write_json(run_dir / "audit.json", [a.as_dict() for a in audits])
    write_parquet(run_dir / "persons.parquet", release_persons(df))
    if exact_statuses:
        write_parquet(run_dir / "exact_attack.parquet", pd.DataFrame(exact_statuses))
    facts = {"units": units, "levels": list(pop.geography.levels[1:]), "attributes": attributes(cfg, pop)}
    write_json(run_dir / "manifest.json", {
        "name": cfg.name, "config_hash": cfg.digest(), "code_fingerprint": code_fingerprint(),
        "versions": versions(), "jax": jax_info(), "seeds": {"experiment": cfg.seed, "population": cfg.data.seed},
        "units": units, "facts": facts, "seconds_total": round(time.perf_counter() - t_start, 2),
    })
    plot_release(df, util, run_dir, cfg)
    write_report(cfg, run_dir, df, util, audits, ledger, facts)
    return run_dir


def _evaluate_unit(cfg: ExperimentConfig, pop, unit: str, wb: bool, ledger: Ledger, bar,
                   topdown_cache: dict | None = None) -> tuple[pd.DataFrame, list, list]:
    """All releases of one unit, each attacked; plus the exact-table attack and the baselines."""
    r = cfg.release
    topdown_cache = {} if topdown_cache is None else topdown_cache
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

    def trivial(targets, tag):
        """The one-way-margins attack on what was published (noisy answers for a DP release)."""
        ranking, size = margins_attack(w, targets, rng=np.random.default_rng(_stable("ties", cfg.seed, unit, wb, tag)),
                                       limit=int(ks.max()))
        return match_rate_curve(ranking, truth, ks, u, size)

    common = dict(unit=unit, variant=wb, u=u, n_rows=len(D), n_unique=unique_persons(D))
    exact_on = cfg.attack.exact and not isinstance(w, Workload)

    def exact_attack(counts, mech, setting):
        """The integer-programming attack on a release's published tables (no certificates: a noisy
        release's tables are rarely consistent, and then there is nothing to solve)."""
        from reconstruct.exact import reconstruct_exact

        res, _ = reconstruct_exact(w, np.clip(np.rint(counts), 0, None).astype(np.int64),
                                   time_limit=cfg.attack.exact_time_limit, certify_support=False)
        exact_status.append({"unit": unit, "variant": wb, "mechanism": mech, "setting": setting, "status": res.status})
        if not res.solved:
            return None
        keys, n = res.rows()
        return match_rate_curve(rank_by_score(keys, n.astype(np.float64)), truth, ks, u)

    exact_status: list = []
    exact_cols = dict(epsilon=math.inf, setting=math.inf, mechanism="exact", utility_error=0.0, **common)
    curves = [attack(exact, "exact").assign(method="rap_rank", **exact_cols),
              trivial(exact, "exact").assign(method=MARGINS_ATTACK, **exact_cols)]
    if exact_on:
        c = exact_attack(exact_counts, "exact", math.inf)
        if c is not None:
            curves.append(c.assign(epsilon=math.inf, setting=math.inf, mechanism="exact", method="exact",
                                   utility_error=0.0, **common))
    bar.update()
    priors = build_priors(pop, cfg, prob)
    for b, curve, _ in baseline_curves(cfg, priors, unit, truth, ks, u, lambda b: tie_rng):
        curves.append(curve.assign(epsilon=np.nan, setting=np.nan, mechanism="baseline", method=b,
                                   utility_error=np.nan, **common))
    utility = []
    micro = [_micro_rows(D, unit, wb, "D"), _micro_rows(H, unit, wb, "holdout")]
    extra = {"unit": unit, "with_block": wb}
    if wb:
        extra["block_list"] = prob.block_list_source
    for mech in r.mechanisms:
        for setting in r.settings(mech):
            rng = np.random.default_rng(_stable("release", cfg.seed, unit, mech, setting))
            if mech == "swapping":
                pub = publish_swapping(cfg, setting, D, w, rng)
                ledger.note("swapping", "numpy (seeded)", NOT_DP, swap_rate=setting, **pub.facts, **extra,
                            invariants=own_invariants(cfg, mech, wb))
            else:
                backend = _backend(cfg, unit, mech, setting)
                if mech == "topdown":
                    trees, releases = topdown_cache.setdefault("trees", {}), topdown_cache.setdefault("releases", {})
                    if (unit, wb) not in trees:  # one tree per root, shared by every unit under it
                        td = topdown_root(cfg, pop, unit, wb)
                        trees.update({(other, wb): td for other in td.nodes})
                    td = trees[(unit, wb)]
                    if (td.root, wb, setting) not in releases:  # one release per root and ε
                        releases[(td.root, wb, setting)] = publish_topdown(cfg, td, setting,
                                                                          _backend(cfg, td.root, mech, setting))
                    _, estimates, mech_rec = releases[(td.root, wb, setting)]
                    ok, note = _fit_note(backend, mech)
                    pub = topdown_unit(td, estimates, unit, w, mech_rec, ok, note)
                    extra_td = {"root": td.root, "tree_levels": td.tree.levels}
                else:
                    pub = publish(cfg, mech, setting, D, w, backend, rng, key=unit_key(cfg, "fit", unit, setting))
                    extra_td = {}
                if getattr(backend, "contrib", False):
                    extra.update(opendp_version=backend.version, opendp_contrib=True)
                ledger.record(pub.record, backend.name, pub.for_publication, publication_note=pub.publication_note,
                              invariants=own_invariants(cfg, mech, wb), **extra, **extra_td)
            if pub.rows is not None:
                micro.append(_micro_rows(pub.rows, unit, wb, "release", mech, setting))
            rows = table_utility(pub.counts, exact_counts, w) + totals_utility(pub.counts, exact_counts, w)
            utility += [dict(row, epsilon=setting if mech != "swapping" else np.nan, setting=setting, mechanism=mech,
                             unit=unit, variant=wb) for row in rows]
            tables_only = [row for row in rows if row["table"] not in ("block totals", "unit total")]
            err = float(np.mean([row["mae_per_cell"] for row in tables_only]))
            eps_col = setting if mech != "swapping" else np.nan
            cols = dict(epsilon=eps_col, setting=setting, mechanism=mech, utility_error=err, **common)
            curves.append(attack(pub.answers, f"{mech}-{setting}").assign(method="rap_rank", **cols))
            curves.append(trivial(pub.answers, f"{mech}-{setting}").assign(method=MARGINS_ATTACK, **cols))
            if exact_on:
                c = exact_attack(pub.counts, mech, setting)
                if c is not None:
                    curves.append(c.assign(epsilon=eps_col, setting=setting, mechanism=mech, method="exact",
                                           utility_error=err, **common))
            bar.update()
    published = len(micro) > 2
    return (pd.concat(curves, ignore_index=True), utility, exact_status,
            pd.concat(micro, ignore_index=True) if published else None)


def _micro_rows(data: Dataset, unit: str, wb: bool, role: str, mechanism: str = "", setting: float = np.nan):
    """A unit's rows for the risk measures, as labels (a block's name is the unit's own): D, D_holdout
    or a published file, tagged."""
    from experiments.risks import frame

    return frame(data, unit).assign(variant=wb, role=role, mechanism=mechanism, setting=setting)


#: The tag columns of :func:`_micro_rows`; every other column is a person's attribute (or UNIT).
_MICRO_TAGS = ["variant", "role", "mechanism", "setting"]


def measure_risks(cfg: ExperimentConfig, micro: list[pd.DataFrame]) -> tuple[pd.DataFrame, str | None]:
    """anonymeter's risks of every published microdata file (per variant, mechanism and setting,
    all units together), with D as the original and D_holdout as the control set: persons of the
    same units that no release ever saw."""
    from experiments.risks import RiskJob, measure

    if not cfg.release.risks:
        return pd.DataFrame(), "not run: release.risks is false"
    if not micro:
        return measure([])
    rows = pd.concat(micro, ignore_index=True)
    jobs = []
    for wb, part in rows.groupby("variant", sort=False):
        cols = [c for c in part.columns if c not in _MICRO_TAGS]
        ori, control = (part.loc[part["role"] == role, cols].reset_index(drop=True) for role in ("D", "holdout"))
        released = part[part["role"] == "release"]
        for (mech, setting), sel in released.groupby(["mechanism", "setting"], sort=False):
            jobs.append(RiskJob(mech, float(setting), ori, sel[cols].reset_index(drop=True), control, wb))
    return measure(jobs, seed=cfg.seed)


def own_invariants(cfg: ExperimentConfig, mechanism: str, with_block: bool) -> list[str]:
    """The declared invariants a mechanism's release really publishes, for its ledger entry: the
    root total for TopDown only, the unit total where the tables' n is taken as declared
    (Laplace tables and what is fitted to them), the block list wherever blocks are published."""
    uses = {"root_total": mechanism == "topdown",
            "unit_total": mechanism in ("laplace_tables", "synthetic"),
            "occupied_blocks": with_block}
    return [i for i in cfg.release.invariants if uses.get(i, True)]


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
    area = df.groupby(["variant", "unit", "setting", "mechanism", "method"], dropna=False)["match_rate"].mean()
    area = area.reset_index()
    base = area[area["mechanism"] == "baseline"]
    best = base.loc[base.groupby(["variant", "unit"])["match_rate"].idxmax(), ["variant", "unit", "method", "match_rate"]]
    best = best.rename(columns={"method": "best_baseline", "match_rate": "baseline_area"})
    rap = area[area["mechanism"] != "baseline"].rename(columns={"match_rate": "rap_area"}).drop(columns="method")
    out = rap.merge(best, on=["variant", "unit"])
    out["lift"] = out["rap_area"] - out["baseline_area"]
    util = df[df["mechanism"] != "baseline"].groupby(["variant", "unit", "setting", "mechanism"])["utility_error"].first()
    return out.merge(util.reset_index(), on=["variant", "unit", "setting", "mechanism"])
