"""The ε audit of evaluate-release's own publishing path (experiments.release.publish), on worst-case
neighbouring datasets under the declared relation, at every ε the config releases at."""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from experiments.config import ConfigError, ExperimentConfig
from experiments.problem import (_stable, build_workload, load_population, prepare_unit, private_half, select_units,
                                 unit_key)
from microdata.dataset import Dataset
from microdata.domain import Attribute, Domain
from microdata.geography import FROM_ROWS, Geography
from experiments.metrics import lookup
from microdata.marginals import Workload
from synth.release import workload_counts
from synth.audit import (AuditResult, RecordingNoise, ReplayNoise, ReplaySequence, audit_outputs,
                         clipped_upper_excess, gaussian_shape_pvalue, gaussian_sigma_upper, geometric_scale_upper,
                         geometric_shape_pvalue, laplace_scale_upper, laplace_shape_pvalue)
from synth.histogram import SparseHistogram
from synth.mechanism import PrivacyError, Relation, parse_relation
from synth.noise import OpenDPNoise, SimulationNoise

log = logging.getLogger(__name__)

#: Cells of the small domain the histograms are audited on (their sensitivity does not depend on
#: the domain's size; the auditor needs every cell's value in every run).
HISTOGRAM_CELLS = 64
#: Cells of the smoothed histogram's audit domain: its δ grows with the number of cells, and on a
#: few cells the whole privacy loss is reached by an event of reasonable probability.
SMOOTHED_CELLS = 4
#: Runs of the large-domain histogram path (one Python call per release).
SPARSE_RUNS = 20_000
#: Noise values drawn per compiled chunk of releases.
CHUNK_VALUES = 20_000_000


def audit_release(cfg: ExperimentConfig, pop: Dataset | None = None, unit: str | None = None,
                  progress: bool = False) -> list[AuditResult]:
    """Audit every configured mechanism at every audited ε of the config, through
    :func:`experiments.release.publish`, the function evaluate-release attacks and an agency
    publishes through.

    Each audit releases two worst-case neighbouring datasets ``runs`` times each and certifies a
    Clopper–Pearson lower bound on ε (:func:`synth.audit.audit_outputs`), beside named checks: the
    block list does not depend on the persons; the release's shape does not depend on the data;
    what is published after the noise depends on the data only through the noisy counts (so no
    n, no block list leaks past the noise); and, for the Laplace tables, the noise really added
    is as large as the declared ε needs. Tables are audited over the unit's attack domain with
    at most two of its public blocks; histograms over a domain of at most 64 cells made of the
    smallest attack attributes, the large-domain path included (by lowering its dense limit).
    """
    r = cfg.release
    if r is None:
        raise ConfigError("this config has no 'release' section: nothing to audit")
    pop = load_population(cfg) if pop is None else pop
    unit = select_units(pop, cfg)[0] if unit is None else unit
    eps_list = r.audited_epsilons()
    mechanisms = r.dp_mechanisms  # swapping is not DP: there is no ε to audit
    cfg = _family_level(cfg, len(eps_list) * len(cfg.target.with_block), mechanisms)
    jobs = [(wb, eps, m) for wb in cfg.target.with_block for eps in eps_list for m in mechanisms]
    bar = tqdm(total=len(jobs), desc="audits", disable=not (progress and sys.stderr.isatty()))
    out = []
    for wb in cfg.target.with_block:
        frame, areas = _frame(cfg, pop, unit, wb)
        blocks_check = _block_list_check(cfg, pop, unit) if wb else None
        workload = build_workload(cfg, cfg.queries[0], frame, areas)
        pair = _worst_pair(frame, workload, parse_relation(r.relation))
        small = _histogram_pair(frame, parse_relation(r.relation))
        smallest = _histogram_pair(frame, parse_relation(r.relation), cells=SMOOTHED_CELLS)
        tables_result, topdown = {}, {}  # TopDown: its neighbours and structure check, shared by every ε
        for eps in eps_list:
            for mech in mechanisms:
                if mech == "laplace_tables" or (mech == "synthetic" and eps not in tables_result):
                    tables_result[eps] = _audit_tables(cfg, eps, workload, pair)
                if mech in ("laplace_tables", "synthetic"):
                    res = tables_result[eps]
                    checks = dict(res.checks)
                    if mech == "synthetic":
                        checks.update(_synthetic_checks(cfg, eps, workload, pair))
                    details = dict(res.details, audited_as="laplace_tables; the fit is post-processing of them"
                                   if mech == "synthetic" else "the published noisy counts")
                    res = AuditResult(mech, eps, res.epsilon_lower_bound, res.runs, res.confidence, res.event,
                                      checks, details)
                elif mech == "perturbed_histogram":
                    res = _audit_perturbed(cfg, eps, small)
                elif mech == "topdown":
                    if not topdown:  # one pair and one structure check for every ε
                        pair_td = _topdown_pair(cfg, pop, unit, wb)
                        topdown.update(pair=pair_td,
                                       structure=_topdown_structure(cfg, pop, unit, wb, pair_td.td.nodes))
                    res = _audit_topdown(cfg, eps, topdown["pair"], topdown["structure"])
                else:
                    res = _audit_smoothed(cfg, eps, smallest)
                if blocks_check is not None:
                    res.checks["block_list"] = blocks_check
                res.details.update(with_block=wb, unit_of_public_inputs=unit)
                out.append(res)
                bar.update()
    bar.close()
    return out


#: Statistical tests per audit result, by mechanism: the certified bound, the noise scale and the
#: noise shape (tables, TopDown, the perturbed histogram); the bound alone (the smoothed histogram,
#: which adds no noise to counts).
TESTS = {"laplace_tables": 3, "topdown": 3, "perturbed_histogram": 3, "smoothed_histogram": 1}


def _family_level(cfg: ExperimentConfig, results: int, mechanisms: list[str]) -> ExperimentConfig:
    """The config every check of one audit runs at: each statistical test at confidence
    1 − false_alarm / K, K the tests of the whole audit (every ε, variant and mechanism; synthetic
    shares the tables' tests), so that an audit of correct mechanisms fails with probability at most
    ``release.audit.false_alarm`` (Bonferroni); never below ``release.audit.confidence``."""
    a = cfg.release.audit
    kinds = {("laplace_tables" if m == "synthetic" else m) for m in mechanisms}
    tests = results * sum(TESTS[m] for m in kinds)
    level = max(a.confidence, 1 - a.false_alarm / max(tests, 1))
    audit = a.model_copy(update={"confidence": level})
    return cfg.model_copy(update={"release": cfg.release.model_copy(update={"audit": audit})})


# ---- inputs: a small frame of public inputs and worst-case neighbours in it ------------------------


def _frame(cfg: ExperimentConfig, pop: Dataset, unit: str, with_block: bool) -> tuple[Domain, dict | None]:
    """The attack domain of ``unit`` (BLOCK from its public block list), cut to two blocks, and
    the areas inside the unit (the tracts of a county) of those blocks: every block publishes the
    same tables and a person lives in one; when the unit has areas the second block is in another
    area than the first where one exists, so that a person moving between them changes the
    areas' tables too."""
    prob = prepare_unit(pop, cfg, unit, with_block, pad_blocks=False)
    dom = prob.private.domain
    if not with_block:
        return dom, None
    names = dom.attribute("BLOCK").values
    finest = prob.areas[list(prob.areas)[-1]] if prob.areas else []
    area_of = {b: i for i, (_, members) in enumerate(finest) for b in members}
    other = next((b for b in range(1, len(names)) if area_of.get(b) != area_of.get(0)), 1)
    keep = [0, other][:len(names)]
    areas = {lv: [(a, [keep.index(b) for b in members if b in keep]) for a, members in listed
                  if any(b in keep for b in members)] for lv, listed in (prob.areas or {}).items()}
    frame = Domain((Attribute("BLOCK", tuple(names[b] for b in keep)),)
                   + tuple(a for a in dom.attributes if a.name != "BLOCK"))
    return frame, areas


def _cells_of(workload, codes: np.ndarray) -> np.ndarray:
    """(rows × queries) 0/1: the released cells each row is counted in (computed from the rows,
    as exact answers are, independently of any sensitivity computation)."""
    codes = np.atleast_2d(codes)
    if isinstance(workload, Workload):
        out = np.zeros((len(codes), workload.num_queries), dtype=bool)
        for off, m in zip(workload.offsets()[:-1], workload.marginals):
            idx = [workload.domain.index(a) for a in m]
            flat = np.ravel_multi_index(tuple(codes[:, i] for i in idx), workload.shape(m))
            out[np.arange(len(codes)), off + flat] = True
        return out
    q = np.array(workload.queries, dtype=np.int64).reshape(len(workload.queries), len(workload.domain))
    hit = np.ones((len(codes), len(q)), dtype=bool)
    for j in range(len(workload.domain)):
        hit &= workload.membership(j).astype(bool)[codes[:, j]][:, q[:, j]]
    return hit


def _person_types(domain: Domain, block: int | None, limit: int = 200_000, seed: int = 0) -> np.ndarray:
    """Every person type of ``domain`` (BLOCK fixed to ``block``), or ``limit`` of them at random."""
    free = [j for j, a in enumerate(domain.names) if a != "BLOCK"]
    sizes = [domain.sizes[j] for j in free]
    total = int(np.prod(sizes))
    flat = np.arange(total) if total <= limit else np.random.default_rng(seed).choice(total, limit, replace=False)
    codes = np.zeros((len(flat), len(domain)), dtype=np.int64)
    codes[:, free] = np.stack(np.unravel_index(flat, sizes), axis=1)
    if "BLOCK" in domain:
        codes[:, domain.index("BLOCK")] = block
    return codes


def _worst_pair(domain: Domain, workload, relation: Relation) -> tuple[Dataset, Dataset]:
    """Neighbours D, D′ whose released counts are as far apart as one person can make them:
    add/remove adds the person type counted in the most cells; replace-one replaces that person
    by the type, in another block, whose cells differ from theirs the most."""
    has_block = "BLOCK" in domain
    a_types = _person_types(domain, 0 if has_block else None)
    counts = np.concatenate([_cells_of(workload, a_types[i:i + 2000]).sum(axis=1) for i in range(0, len(a_types), 2000)])
    a = a_types[int(np.argmax(counts))]
    base = np.array([[(i + 2) % s for s in domain.sizes] for i in range(3)], dtype=np.int64)
    if relation is Relation.ADD_REMOVE:
        return Dataset(domain, base), Dataset(domain, np.vstack([base, a]))
    other = 1 if has_block and domain.size("BLOCK") > 1 else 0
    b_types = _person_types(domain, other if has_block else None)
    cells_a = _cells_of(workload, a[None, :])[0]
    diff = np.concatenate([(_cells_of(workload, b_types[i:i + 2000]) != cells_a[None, :]).sum(axis=1)
                           for i in range(0, len(b_types), 2000)])
    b = b_types[int(np.argmax(diff))]
    return Dataset(domain, np.vstack([base, a])), Dataset(domain, np.vstack([base, b]))


def _histogram_pair(frame: Domain, relation: Relation, cells: int = HISTOGRAM_CELLS
                    ) -> tuple[Dataset, Dataset, tuple[int, int]]:
    """Neighbours over a small domain (the smallest attack attributes, at most ``cells`` cells): D
    has one person alone in cell a and one in cell c; D′ moves the first to the empty cell b
    (replace-one) or adds a person in b (add/remove). Returns D, D′ and the keys (a, b)."""
    attrs, size = [], 1
    for at in sorted(frame.attributes, key=lambda x: x.size):
        if size * at.size <= cells:
            attrs.append(at)
            size *= at.size
    if size < 3:
        attrs, size = [Attribute.range("CELL", 4)], 4
    dom = Domain(tuple(attrs))
    a, b, c = 0, 1, size - 1
    D = Dataset(dom, dom.decode(np.array([a, c])))
    D2 = Dataset(dom, dom.decode(np.array([b, c] if relation is Relation.REPLACE_ONE else [a, c, b])))
    return D, D2, (a, b)


# ---- the audits ---------------------------------------------------------------------------------


def _noise(cfg: ExperimentConfig, *parts):
    if cfg.release.backend == "opendp":
        return OpenDPNoise()
    return SimulationNoise(np.random.default_rng(_stable("audit-noise", cfg.seed, *parts)))


def _publish(cfg, mech, eps, D, workload, backend, rng, **kw):
    from experiments.release.publish import publish

    return publish(cfg, mech, eps, D, workload, backend, rng, **kw)


def _structure_check(cfg, mech, eps, workload, D, D2, **kw) -> str:
    rng = np.random.default_rng(0)
    try:
        s1 = _publish(cfg, mech, eps, D, workload, _noise(cfg, "structure", 1), rng, **kw).structure
        s2 = _publish(cfg, mech, eps, D2, workload, _noise(cfg, "structure", 2), rng, **kw).structure
    except PrivacyError as e:
        return f"fail: {e}"
    return "pass" if s1 == s2 else "fail: the shape of the release differs between neighbours"


def _replay_check(cfg, mech, eps, workload, D, D2, **kw) -> str:
    """Release D once; replay the same noisy counts for D and D′: what follows the noise must agree."""
    rng = np.random.default_rng(0)
    tables_kw = {k: v for k, v in kw.items() if k != "key"}
    source = "laplace_tables" if mech == "synthetic" else mech  # the synthetic rows are fitted to these counts
    first = _publish(cfg, source, eps, D, workload, _noise(cfg, "replay"), rng, **tables_kw)
    if isinstance(first.output, SparseHistogram):
        values = np.zeros(first.output.domain_size, dtype=np.int64)
        values[first.output.keys] = first.output.counts
    else:
        values = first.output.counts
    try:
        p1 = _publish(cfg, mech, eps, D, workload, ReplayNoise(values), np.random.default_rng(1), **kw)
        p2 = _publish(cfg, mech, eps, D2, workload, ReplayNoise(values), np.random.default_rng(1), **kw)
    except PrivacyError as e:
        return f"fail: {e}"
    same = np.array_equal(p1.answers, p2.answers) and (
        not isinstance(p1.output, Dataset) or np.array_equal(p1.output.codes, p2.output.codes))
    t1, t2 = getattr(p1.output, "total", None), getattr(p2.output, "total", None)
    if not same or t1 != t2:
        return ("fail: with the same noisy counts, the neighbours' releases differ "
                f"(totals {t1} and {t2}): the release reads the data beyond its noisy counts")
    return "pass"


def _batches(runs: int, values_per_run: int):
    """Batch sizes adding up to ``runs``, each batch at most :data:`CHUNK_VALUES` noise values."""
    chunk = int(max(100, min(runs, CHUNK_VALUES // max(values_per_run, 1))))
    done = 0
    while done < runs:
        n = min(chunk, runs - done)
        yield n
        done += n


def _audit_tables(cfg: ExperimentConfig, eps: float, workload, pair) -> AuditResult:
    a = cfg.release.audit
    D, D2 = pair
    c1, c2 = workload_counts(D, workload), workload_counts(D2, workload)
    idx = np.flatnonzero(c2 - c1)
    ys = {0: [], 1: []}
    for which, data in ((0, D), (1, D2)):
        backend = _noise(cfg, "tables", eps, which)
        for n in _batches(a.runs, workload.num_queries):
            pub = _publish(cfg, "laplace_tables", eps, data, workload, backend, np.random.default_rng(0), runs=n)
            ys[which].append(pub.output.counts[:, idx])
    y1, y2 = np.concatenate(ys[0]), np.concatenate(ys[1])
    res = audit_outputs(y1, y2, c1[idx], (c2 - c1)[idx], eps, "laplace_tables", a.confidence)
    distance = int(np.abs(c2 - c1).sum())
    noise = np.concatenate([y1 - c1[idx], y2 - c2[idx]])  # (2 runs × differing cells)
    eps_noise, worst = noise_epsilon(noise, np.abs(c2 - c1)[idx], a.confidence)
    p_shape = laplace_shape_pvalue(noise)
    checks = {
        "structure": _structure_check(cfg, "laplace_tables", eps, workload, D, D2),
        "post_processing": _replay_check(cfg, "laplace_tables", eps, workload, D, D2),
        "noise_scale": "pass" if eps_noise <= eps else
        f"fail: the noise added gives ε ≥ {eps_noise:.4g} for this pair (each differing cell's distance over an upper "
        f"bound on its own noise scale, summed; smallest {worst:.4g}), whose counts are {distance} apart "
        "(assumes discrete Laplace noise, which noise_shape checks)",
        "noise_shape": "pass" if p_shape >= 1 - a.confidence else
        f"fail: the noise added is not discrete Laplace (chi-square over its whole range, p = {p_shape:.2g} < "
        f"{1 - a.confidence:.2g})",
    }
    return AuditResult("laplace_tables", eps, res.epsilon_lower_bound, a.runs, a.confidence, res.event, checks,
                       {"differing_cells": int(idx.size), "pair_l1_distance": distance,
                        "epsilon_from_noise_scale": round(eps_noise, 6), "noise_shape_p_value": p_shape})


def noise_epsilon(noise: np.ndarray, distance: np.ndarray, confidence: float) -> tuple[float, float]:
    """The ε the noise really added spends for a pair: Σ_c |Δ_c| / t_c over the differing cells, each
    cell's discrete Laplace scale t_c bounded above from its own draws (so one table noised for a
    larger ε shows, even among many), at ``confidence`` jointly (Bonferroni over cells). Returns the
    ε and the smallest scale bound."""
    k = noise.shape[1]
    level = 1 - (1 - confidence) / max(k, 1)
    scales = np.array([laplace_scale_upper(noise[:, j], level) for j in range(k)])
    with np.errstate(divide="ignore"):
        eps = float(np.sum(np.where(scales > 0, distance / scales, np.inf)))
    return eps, float(scales.min())


def _synthetic_checks(cfg: ExperimentConfig, eps: float, workload, pair) -> dict:
    """The synthetic release's own checks: its shape, and that its rows follow from the noisy
    tables alone (the same tables, the same fit, the same rows, n included)."""
    D, D2 = pair
    key = unit_key(cfg, "audit-fit", eps)
    return {"synthetic_structure": _structure_check(cfg, "synthetic", eps, workload, D, D2, key=key),
            "synthetic_post_processing": _replay_check(cfg, "synthetic", eps, workload, D, D2, key=key)}


def _histogram_workload(D: Dataset) -> Workload:
    return Workload(D.domain, tuple((a,) for a in D.domain.names))


def _audit_perturbed(cfg: ExperimentConfig, eps: float, small) -> AuditResult:
    """Both paths of the perturbed histogram: dense (every cell noised) and the large-domain one
    (empty cells' positive noise drawn directly), the latter by lowering the dense limit below
    the small domain's size; the larger of the two bounds is reported."""
    a = cfg.release.audit
    D, D2, (ka, kb) = small
    keys = np.array([ka, kb])
    c1 = np.bincount(D.keys(), minlength=D.domain.total_size)[keys]
    c2 = np.bincount(D2.keys(), minlength=D.domain.total_size)[keys]
    w = _histogram_workload(D)
    results = {}
    for path, limit, runs in (("dense", D.domain.total_size, a.runs), ("large-domain", 1, min(a.runs, SPARSE_RUNS))):
        ys = []
        for which, data in ((0, D), (1, D2)):
            backend = _noise(cfg, "hist", eps, path, which)
            if path == "large-domain" and not isinstance(backend, SimulationNoise):
                break
            rng = np.random.default_rng(_stable("audit-hist", cfg.seed, eps, path, which))
            out = _publish(cfg, "perturbed_histogram", eps, data, w, backend, rng, runs=runs, dense_limit=limit).output
            if isinstance(out, list):
                out = np.stack([lookup(h.keys, h.counts, keys, missing=0) for h in out])
            else:
                out = out[:, keys]
            ys.append(out)
        if len(ys) == 2:  # two paths, the larger bound reported: each certified at (1 + confidence) / 2
            results[path] = audit_outputs(ys[0], ys[1], c1, c2 - c1, eps, "perturbed_histogram",
                                          (1 + a.confidence) / 2)
            if path == "dense":
                dense = ys
    path, best = max(results.items(), key=lambda kv: kv[1].epsilon_lower_bound)
    # the noise really added, on the side the clip at zero never touches (per differing cell, both
    # datasets' draws): its scale bounds the ε spent, its shape must be discrete Laplace
    excess = [np.concatenate([clipped_upper_excess(dense[0][:, j], c1[j]), clipped_upper_excess(dense[1][:, j], c2[j])])
              for j in range(2)]
    diff = np.abs(c2 - c1)
    cells = [j for j in range(2) if diff[j] > 0]
    level = 1 - (1 - a.confidence) / max(len(cells), 1)  # jointly over the differing cells
    scales = {j: geometric_scale_upper(excess[j], level) for j in cells}
    with np.errstate(divide="ignore"):
        eps_noise = float(sum(diff[j] / scales[j] if scales[j] > 0 else np.inf for j in cells))
    p_shape = min((geometric_shape_pvalue(excess[j]) for j in cells), default=1.0)
    checks = {"structure": _structure_check(cfg, "perturbed_histogram", eps, w, D, D2),
              "post_processing": _replay_check(cfg, "perturbed_histogram", eps, w, D, D2),
              "noise_scale": "pass" if eps_noise <= eps else
              f"fail: the noise added gives ε ≥ {eps_noise:.4g} for this pair (each differing cell's distance over an "
              "upper bound on its noise scale, from the draws above the clip at zero; assumes discrete Laplace noise, "
              "which noise_shape checks)",
              "noise_shape": "pass" if p_shape >= (1 - a.confidence) / max(len(cells), 1) else
              f"fail: the noise added is not discrete Laplace (chi-square of its upper side, geometric, over the whole "
              f"range: p = {p_shape:.2g})"}
    details = {f"epsilon_lower_bound_{p.replace('-', '_')}_path": round(r.epsilon_lower_bound, 6) for p, r in results.items()}
    details.update(histogram_cells=D.domain.total_size, epsilon_from_noise_scale=round(eps_noise, 6),
                   noise_shape_p_value=p_shape)
    return AuditResult("perturbed_histogram", eps, best.epsilon_lower_bound, best.runs, a.confidence,
                       f"{path} path: {best.event}", checks, details)


def _audit_smoothed(cfg: ExperimentConfig, eps: float, small) -> AuditResult:
    """The smoothed histogram's worst case: a person alone in their cell moves to an empty one,
    in a dataset of two persons released as two draws (k = n), where the whole privacy loss is
    reached by an event of reasonable probability (both draws in the cell the person moved to)."""
    a = cfg.release.audit
    D, D2, (ka, kb) = small
    if parse_relation(cfg.release.relation) is not Relation.REPLACE_ONE:
        raise ConfigError("the smoothed histogram is DP only under replace_one neighbours")
    w = _histogram_workload(D)
    ys = []
    for which, data in ((0, D), (1, D2)):
        rng = np.random.default_rng(_stable("audit-smooth", cfg.seed, eps, which))
        draws = _publish(cfg, "smoothed_histogram", eps, data, w, None, rng, runs=a.runs).output
        ys.append(np.stack([(draws == ka).sum(axis=1), (draws == kb).sum(axis=1)], axis=1))
    res = audit_outputs(ys[0], ys[1], np.zeros(2, np.int64), np.array([-1, 1]), eps, "smoothed_histogram",
                        a.confidence)
    checks = {"structure": _structure_check(cfg, "smoothed_histogram", eps, w, D, D2)}
    return AuditResult("smoothed_histogram", eps, res.epsilon_lower_bound, a.runs, a.confidence, res.event, checks,
                       {"histogram_cells": D.domain.total_size, "draws": len(D)})


@dataclass
class _TopDownPair:
    """Neighbouring inputs of one TopDown release, placed in the real tree: ``td`` holds D (every unit's
    private half), ``td2`` D′; ``path`` the nodes whose histograms differ, per level."""

    td: object
    td2: object
    path: list[np.ndarray]
    types: np.ndarray
    what: str
    sensitivity: dict  # per query, the most one person moves it, found by this audit from the tables
    common: tuple = ()  # the pair for the replay check: the unit's commonest types


def _topdown_pair(cfg: ExperimentConfig, pop: Dataset, unit: str, wb: bool) -> _TopDownPair:
    """The real tree of ``unit``'s root through the production functions, and its worst-case neighbour
    under the declared relation: add/remove adds, to the unit's first block, the person type that lies
    in the most table cells; replace-one replaces one of the unit's persons by the type whose table
    cells differ most from theirs, in the last block of another unit (or block) of the tree. The
    worst case is found from the published tables' own matrix, not from the release's sensitivity."""
    from experiments.release.topdown import person_types, topdown_root, topdown_tree

    td = topdown_root(cfg, pop, unit, wb)
    real = {u: private_half(pop, cfg, u, wb) for u in td.nodes}
    halves = dict(real)
    a_mat = td.strategy.tables.tocsc()
    per_type = np.diff(a_mat.indptr)  # table cells of each person type, counted by this audit
    a = int(np.argmax(per_type))
    relation = parse_relation(cfg.release.relation)
    person = list(td.person_domain.names)
    code_a = td.person_domain.decode(np.array([a]))[0]

    def with_row(D: Dataset, code: np.ndarray, block: int | None) -> Dataset:
        row = np.zeros((1, len(D.domain)), dtype=np.int64)
        for j, name in enumerate(person):
            row[0, D.domain.index(name)] = code[j]
        if block is not None:
            row[0, D.domain.index("BLOCK")] = block
        return Dataset(D.domain, np.vstack([D.codes, row]))

    halves2 = dict(halves)
    if relation is Relation.ADD_REMOVE:
        halves2[unit] = with_row(halves[unit], code_a, 0 if wb else None)
        what = f"one person of the type in most cells ({per_type[a]}) added to {unit}" + (", block 0" if wb else "")
    else:
        others = [u for u in td.nodes if u != unit]
        shared = np.asarray((a_mat.T @ a_mat[:, a]).todense()).ravel()  # cells type t shares with type a
        diff = per_type + per_type[a] - 2 * shared  # |A_t − A_a|₁ for 0/1 columns
        b = int(np.argmax(diff))
        code_b = td.person_domain.decode(np.array([b]))[0]
        halves[unit] = with_row(halves[unit], code_a, 0 if wb else None)
        target = others[-1] if others else unit
        last = (len(td.nodes[target][2]) - 1) if wb else None
        halves2 = dict(halves)
        halves2[unit] = with_row(halves[unit].take(np.arange(len(halves[unit]) - 1)), code_b, None) \
            if target == unit and not wb else halves[unit].take(np.arange(len(halves[unit]) - 1))
        if target != unit or wb:
            halves2[target] = with_row(halves2[target], code_b, last)
        what = (f"one person of the type in most cells ({per_type[a]}) in {unit} replaced by the type differing in "
                f"most cells ({int(diff[b])}), in {target}" + (f", block {last}" if wb else ""))
    tree1 = topdown_tree(cfg, td.shape, td.nodes, halves, td.strategy, td.person_domain)
    tree2 = topdown_tree(cfg, td.shape, td.nodes, halves2, td.strategy, td.person_domain)
    td1, td2 = dataclasses.replace(td, tree=tree1), dataclasses.replace(td, tree=tree2)
    path = [np.flatnonzero((h1 != h2).any(axis=1)) for h1, h2 in zip(tree1.hist, tree2.hist)]
    types = np.flatnonzero((tree1.hist[-1] != tree2.hist[-1]).any(axis=0))
    if a not in types:
        types = np.union1d(types, [a])
    mult = 2 if relation is Relation.REPLACE_ONE else 1
    # the replay's pair: one person of the unit's commonest type removed, or made the second commonest
    # (a change the estimates show, where a rare type's may be rounded away)
    D = real[unit]
    types_u = person_types(D, td.person_domain)
    common = (td1, td2)
    if len(D):
        order = np.argsort(-np.bincount(types_u, minlength=td.strategy.types), kind="stable")
        row = int(np.flatnonzero(types_u == order[0])[0])
        changed = dict(real)
        if relation is Relation.ADD_REMOVE:
            changed[unit] = D.take(np.setdiff1d(np.arange(len(D)), [row]))
        else:
            codes = D.codes.copy()
            other = td.person_domain.decode(order[1:2])[0]
            for j, name in enumerate(person):
                codes[row, D.domain.index(name)] = other[j]
            changed[unit] = Dataset(D.domain, codes)
        common = tuple(dataclasses.replace(td, tree=topdown_tree(cfg, td.shape, td.nodes, h, td.strategy,
                                                                 td.person_domain)) for h in (real, changed))
    return _TopDownPair(td1, td2, path, types, what, {"detailed": mult, "tables": mult * int(per_type.max())},
                        common)


def _restrict(td, path: list[np.ndarray], types: np.ndarray):
    """The tree cut to the nodes of ``path`` and the person types ``types`` (where the neighbours
    differ): the release measures every node and every cell with independent noise at scales that do
    not depend on which nodes and types there are, so the noise on these is what the full release
    draws for them; the tables keep every cell (the types' cells are the ones that differ)."""
    from synth.topdown import Tree, TreeShape

    shape = td.shape
    ids, parent, hist = [], [], []
    for lv, keep in enumerate(path):
        ids.append(shape.ids[lv][keep])
        if lv == 0:
            parent.append(np.array([-1]))
        else:
            pos = {int(n): i for i, n in enumerate(path[lv - 1])}
            parent.append(np.array([pos[int(p)] for p in shape.parent[lv][keep]], dtype=np.int64))
        hist.append(td.tree.hist[lv][np.ix_(keep, types)])
    strategy = dataclasses.replace(td.strategy, tables=td.strategy.tables[:, types])
    return dataclasses.replace(td, tree=Tree(TreeShape(list(shape.levels), ids, parent), hist), strategy=strategy)


def _audit_topdown(cfg: ExperimentConfig, eps: float, pair: _TopDownPair, structure: str) -> AuditResult:
    """TopDown through the functions evaluate-release publishes with, on neighbours in the real tree.

    - The private step (every node's detailed histogram and tables, noised) is released ``runs`` times
      on the nodes where D and D′ differ, certifying a lower bound on ε; and, per level and query, the
      noise really added bounds the ε it spends for this pair (the pair's distance over an upper
      bound on the noise scale); their sum must not exceed ε (Bonferroni over the terms).
    - Replay: D and D′ released with the same noisy measurements must publish the same MDF and
      tables (the estimation reads nothing but the measurements and the public shape).
    - Structure: neighbours that empty a block and a whole unit publish a tree of the same shape.
    """
    from experiments.release.topdown import publish_topdown

    a = cfg.release.audit
    t1, t2 = _restrict(pair.td, pair.path, pair.types), _restrict(pair.td2, pair.path, pair.types)
    if t1.strategy.cells_per_person() != pair.td.strategy.cells_per_person():
        raise PrivacyError("the audit's person types do not include the one in most table cells")
    h1, h2 = t1.tree.hist, t2.tree.hist
    exact1 = [(h, t1.strategy.tabulate(h)) for h in h1]
    exact2 = [(h, t2.strategy.tabulate(h)) for h in h2]
    coords = [[np.flatnonzero((e1[q] != e2[q]).ravel()) for q in range(2)] for e1, e2 in zip(exact1, exact2)]
    root_total = "root_total" in cfg.release.invariants
    size = sum(e[q].size for e in exact1 for q in range(2))
    ys = {0: [], 1: []}
    for which, td in ((0, t1), (1, t2)):
        backend = _noise(cfg, "topdown", eps, which)
        for n in _batches(a.runs, size):
            meas = publish_topdown(cfg, td, eps, backend, runs=n).measurements
            parts = []
            for lv in range(len(h1)):
                for q, arr in enumerate((meas.detailed[lv], meas.tables[lv])):
                    parts.append(arr.reshape(n, -1)[:, coords[lv][q]])
            ys[which].append(np.concatenate(parts, axis=1))
    y1, y2 = np.concatenate(ys[0]), np.concatenate(ys[1])
    ref1 = np.concatenate([exact1[lv][q].ravel()[coords[lv][q]] for lv in range(len(h1)) for q in range(2)])
    ref2 = np.concatenate([exact2[lv][q].ravel()[coords[lv][q]] for lv in range(len(h1)) for q in range(2)])
    res = audit_outputs(y1, y2, ref1, ref2 - ref1, eps, "topdown", a.confidence)
    terms = [(lv, q) for lv in range(len(h1)) for q in range(2) if coords[lv][q].size]
    level_conf = 1 - (1 - a.confidence) / max(len(terms), 1)
    checks, details, col, spent = {}, {"neighbours": pair.what, "noise_per_level": {}}, 0, 0.0
    gaussian = cfg.release.topdown.accounting == "zcdp"
    what = "ρ" if gaussian else "ε"
    shapes = {}
    budget = eps
    if gaussian:  # the ρ whose zCDP converts to (ε, δ): ε = ρ + 2√(ρ ln(1/δ)), solved here independently
        ln = math.log(1 / cfg.release.topdown.delta)
        budget = (math.sqrt(ln + eps) - math.sqrt(ln)) ** 2
    for lv in range(len(h1)):
        for q, query in enumerate(("detailed", "tables")):
            k = coords[lv][q].size
            if not k:
                continue
            cells = np.concatenate([y1[:, col:col + k] - ref1[col:col + k], y2[:, col:col + k] - ref2[col:col + k]])
            noise = cells.ravel()
            col += k
            delta = pair.sensitivity[query]  # L1, and the squared L2 (0/1 cells): the same number
            # each cell's scale bounded from its own draws, the smallest taken: one table noised for a
            # larger ε shows even among many (Bonferroni over every cell of every term)
            cell_conf = 1 - (1 - level_conf) / k
            bound = gaussian_sigma_upper if gaussian else laplace_scale_upper
            scale_hi = min(bound(cells[:, j], cell_conf) for j in range(k))
            if gaussian:
                e = delta / (2 * scale_hi**2) if scale_hi > 0 else float("inf")
            else:
                e = delta / scale_hi if scale_hi > 0 else float("inf")
            spent += e
            p = gaussian_shape_pvalue(noise) if gaussian else laplace_shape_pvalue(noise)
            shapes[f"{t1.shape.levels[lv]}/{query}"] = p
            details["noise_per_level"][f"{t1.shape.levels[lv]}/{query}"] = {
                "differing_cells": k, "sensitivity": delta, "scale_upper": round(scale_hi, 6),
                f"{what}_at_least": round(e, 6), "shape_p_value": p}
    checks["noise_scale"] = ("pass" if spent <= budget else
                             f"fail: the noise added at the levels spends {what} ≥ {spent:.4g} (each level and "
                             f"query's sensitivity over its noise scale, summed), over the declared {budget:.4g} "
                             f"(assumes discrete {'Gaussian' if gaussian else 'Laplace'} noise; per level in the "
                             "details)")
    details["rho_from_noise_scale" if gaussian else "epsilon_from_noise_scale"] = round(spent, 6)
    worst = min(shapes, key=shapes.get)
    checks["noise_shape"] = ("pass" if shapes[worst] >= (1 - a.confidence) / len(shapes) else
                             f"fail: the noise added at {worst} is not discrete {'Gaussian' if gaussian else 'Laplace'}"
                             f" (chi-square over its whole range, p = {shapes[worst]:.2g})")
    if root_total:
        details["not_audited"] = "the root's total: a declared invariant under replace-one (release.invariants)"
    checks["post_processing"] = _topdown_replay(cfg, eps, pair)
    checks["structure"] = structure
    return AuditResult("topdown", eps, res.epsilon_lower_bound, a.runs, a.confidence, res.event, checks, details)


def _topdown_replay(cfg: ExperimentConfig, eps: float, pair: _TopDownPair) -> str:
    """Release D, record its noisy measurements, release D and D′ replaying them: the estimates (the
    MDF) must be identical. The pair: one person of the unit's commonest type changed (a change the
    estimates show, where the worst case's rare types may be rounded away before any leak is seen)."""
    from experiments.release.topdown import publish_topdown

    d1, d2 = pair.common
    rec = RecordingNoise(_noise(cfg, "topdown-replay", eps))
    publish_topdown(cfg, d1, eps, rec)
    try:
        e1 = publish_topdown(cfg, d1, eps, ReplaySequence(rec.values)).estimates
        e2 = publish_topdown(cfg, d2, eps, ReplaySequence(rec.values)).estimates
    except PrivacyError as e:
        return f"fail: {e}"
    if len(e1) != len(e2) or any(not np.array_equal(x, y) for x, y in zip(e1, e2)):
        return ("fail: with the same noisy measurements, the neighbours' MDFs differ: the estimation reads the "
                "data beyond its measurements")
    return "pass"


def _topdown_structure(cfg: ExperimentConfig, pop: Dataset, unit: str, wb: bool, nodes: dict) -> str:
    """Neighbours that empty a block (its last resident removed) and a whole unit of the target level
    (likewise) must publish trees of the same shape and measurements of the same shapes, through
    the production functions from the population on. ``nodes``: the units of the target level in the
    real tree (:func:`topdown_root`'s)."""
    from experiments.release.topdown import publish_topdown, topdown_root

    geo = pop.geography
    level = cfg.target.level
    inside = np.flatnonzero(np.isin(geo.units(level), list(nodes)))
    if not len(inside):
        return "not run: nobody lives under the root"
    cases = []
    other = [u for u in nodes if u != unit and (geo.units(level) == u).any()]
    if other:  # a whole unit down to one resident, and then none
        rows = np.flatnonzero(geo.units(level) == other[0])
        keep = np.setdiff1d(np.arange(len(pop)), rows[1:])
        cases.append(("a unit", keep, rows[0]))
    if wb:  # a block of the audited unit down to one resident, and then none
        rows = np.flatnonzero(geo.units(level) == unit)
        blocks = geo.units("block")[rows]
        first = rows[blocks == blocks[0]]
        keep = np.setdiff1d(np.arange(len(pop)), first[1:])
        cases.append(("a block", keep, first[0]))
    for what, keep, last in cases:
        shapes = []
        for rows in (keep, np.setdiff1d(keep, [last])):
            sub = pop.take(rows)
            g = Geography(sub.geography.levels, sub.geography.ids, catalogue=geo.catalogue)
            people = Dataset(sub.domain, sub.codes, g)
            try:
                t = topdown_root(cfg, people, unit, wb)
                meas = publish_topdown(cfg, t, min(cfg.release.epsilons), _noise(cfg, "structure", what),
                                       runs=1).measurements
            except (PrivacyError, ConfigError) as e:
                return f"fail: the neighbour that empties {what} could not be released ({e})"
            shapes.append((t.shape.key(), tuple(x.shape for x in meas.detailed + meas.tables)))
        if shapes[0] != shapes[1]:
            return f"fail: emptying {what} changes the shape of the tree or of its measurements"
    return "pass"


def _block_list_check(cfg: ExperimentConfig, pop: Dataset, unit: str) -> str:
    """A tract where one block's only resident is replaced by someone in another of its blocks
    (or removed): the attack domain, hence every table's and histogram's shape, must not change."""
    if "occupied_blocks" in cfg.release.invariants:
        return "declared invariant: occupied_blocks (the block list is published as it is; not audited)"
    geo = pop.geography
    rows = np.flatnonzero(geo.mask(cfg.target.level, unit))
    blocks = sorted(set(geo.units("block")[rows].tolist()))
    if len(blocks) < 2:
        return "not run: the unit has fewer than two occupied blocks"
    first = rows[geo.units("block")[rows] == blocks[0]][:1]
    second = rows[geo.units("block")[rows] == blocks[1]][:3]
    template = pop.take(np.concatenate([first, second]))
    moved = pop.take(np.concatenate([second[:1], second]))  # the lone resident replaced by one of block 2

    def domain_of(people: Dataset):
        g = Geography(people.geography.levels, people.geography.ids, catalogue=geo.catalogue)
        return prepare_unit(Dataset(people.domain, people.codes, g), cfg, unit, True, pad_blocks=False).private.domain

    try:
        same = domain_of(template) == domain_of(moved)
    except Exception as e:  # noqa: BLE001 - a crash on the neighbour is a failed check, reported as such
        return f"fail: the neighbour could not be prepared ({e})"
    if same:
        return "pass"
    source = geo.catalogue.source if geo.catalogue is not None else FROM_ROWS
    return f"fail: the block list changes when a block's only resident is replaced (block list: {source})"
