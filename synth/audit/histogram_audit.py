"""The histogram families: the perturbed histogram's noise and the smoothed histogram's draws."""

from __future__ import annotations

import math

import numpy as np

from censusrecon.microdata.dataset import Dataset, lookup
from censusrecon.microdata.errors import ConfigError
from censusrecon.microdata.marginals import Workload
from censusrecon.microdata.seeds import stable_seed
from censusrecon.synth.audit.checks import (
    BANDS,
    Release,
    MIN_GROUP_DRAWS,
    bound_noise,
    broken_contract,
    contract_failure,
    keyed_release,
    publication_noise,
    replay_check,
    structure_check,
    unit_instance,
    with_real_law,
)
from censusrecon.synth.audit.families import AuditFamily, FamilyCall, register_family
from censusrecon.synth.audit.measured import laplace_white_box
from censusrecon.synth.audit.source import AuditSource
from censusrecon.synth.audit.statistics import (
    AuditResult,
    audit_outputs,
    clipped_upper_excess,
    clopper_pearson,
    geometric_scale_upper,
    geometric_scale_upper_exact,
    geometric_shape_pvalue,
)
from censusrecon.synth.audit.yardstick import detailed_sensitivity, smoothed_mixing
from censusrecon.synth.histogram import SparseHistogram
from censusrecon.synth.mechanism import PrivacyError, Relation, parse_relation
from censusrecon.synth.publishing import Draw

#: Runs of the large-domain histogram path (one Python call per release).
SPARSE_RUNS = 20_000


def _histogram_workload(D: Dataset) -> Workload:
    return Workload(D.domain, tuple((a,) for a in D.domain.names))


def _audit_perturbed(src: AuditSource, mech: str, eps: float, small, seed: int) -> AuditResult:
    """Both paths of the perturbed histogram: dense (every cell noised) and the large-domain one
    (empty cells' positive noise drawn directly), the latter by lowering the dense limit below
    the small domain's size; the larger of the two bounds is reported."""
    spec = src.spec
    a = spec.audit
    D, D2, (ka, kb) = small
    keys = np.array([ka, kb])
    c1 = np.bincount(D.keys(), minlength=D.domain.total_size)[keys]
    c2 = np.bincount(D2.keys(), minlength=D.domain.total_size)[keys]
    w = _histogram_workload(D)
    results = {}
    for path, limit, runs in (("dense", D.domain.total_size, a.runs), ("large-domain", 1, min(a.runs, SPARSE_RUNS))):
        ys = []
        for which, data in ((0, D), (1, D2)):
            backend = bound_noise(seed, "hist", eps, path, which)
            if path == "large-domain" and spec.backend == "opendp":
                break  # publishing with OpenDP noises every cell: it never takes the large-domain path
            rng = np.random.default_rng(stable_seed("audit-hist", seed, eps, path, which))
            out = src.publish(mech, eps, data, w, Draw(backend, rng, runs=runs, dense_limit=limit)).output
            if isinstance(out, list):
                out = np.stack([lookup(h.keys, h.counts, keys, missing=0) for h in out])
            else:
                out = out[:, keys]
            ys.append(out)
        if len(ys) == 2:  # two paths, the larger bound reported: each certified at (1 + confidence) / 2
            results[path] = audit_outputs(ys[0], ys[1], c1, c2 - c1, eps, mech,
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
    checks = {"structure": structure_check(src, Release(mech, eps, w, D), D2),
              "post_processing": replay_check(src, Release(mech, eps, w, D), D2),
              "noise_scale": "pass" if eps_noise <= eps else
              f"fail: the noise added gives ε ≥ {eps_noise:.4g} for this pair (each differing cell's distance over an "
              "upper bound on its noise scale, from the draws above the clip at zero; assumes discrete Laplace noise, "
              "which noise_shape checks)",
              "noise_shape": "pass" if p_shape >= (1 - a.confidence) / max(len(cells), 1) else
              f"fail: the noise added is not discrete Laplace (chi-square of its upper side, geometric, over the whole "
              f"range: p = {p_shape:.2g})"}
    details = {f"epsilon_lower_bound_{p.replace('-', '_')}_path": round(r.epsilon_lower_bound, 6) for p, r in results.items()}
    details.update(histogram_cells=D.domain.total_size, epsilon_from_noise_scale=round(eps_noise, 6),
                   noise_shape_p_value=p_shape, white_box=laplace_white_box(
                       eps_noise, eps, f"the noise above the clip at zero of the worst-case pair's {len(cells)} "
                       f"differing cells ({a.runs} releases of each side): each cell's scale bounded above, its "
                       "distance over it, summed", int(sum(excess[j].size for j in cells))).as_dict())
    return AuditResult(mech, eps, best.epsilon_lower_bound, best.runs, a.confidence,
                       f"{path} path: {best.event}", checks, details)


def _audit_smoothed(src: AuditSource, mech: str, eps: float, small, seed: int) -> AuditResult:
    """The smoothed histogram's worst case: a person alone in their cell moves to an empty one,
    in a dataset of two persons released as two draws (k = n), where the whole privacy loss is
    reached by an event of reasonable probability (both draws in the cell the person moved to)."""
    spec = src.spec
    a = spec.audit
    D, D2, (ka, kb) = small
    if parse_relation(spec.relation) is not Relation.REPLACE_ONE:
        raise ConfigError("the smoothed histogram is DP only under replace_one neighbours")
    w = _histogram_workload(D)
    ys = []
    for which, data in ((0, D), (1, D2)):
        rng = np.random.default_rng(stable_seed("audit-smooth", seed, eps, which))
        draws = src.publish(mech, eps, data, w, Draw(None, rng, runs=a.runs)).output
        ys.append(np.stack([(draws == ka).sum(axis=1), (draws == kb).sum(axis=1)], axis=1))
    res = audit_outputs(ys[0], ys[1], np.zeros(2, np.int64), np.array([-1, 1]), eps, mech,
                        a.confidence)
    checks = {"structure": structure_check(src, Release(mech, eps, w, D), D2)}
    return AuditResult(mech, eps, res.epsilon_lower_bound, a.runs, a.confidence, res.event, checks,
                       {"histogram_cells": D.domain.total_size, "draws": len(D), "white_box_why_not": (
                           "its releases are draws from a smoothed histogram, not noisy measurements: only the black "
                           "box measures it, at the worst case where one event reaches its whole loss")})


def _histogram_law_unit(src: AuditSource, mech: str, unit: str, wb: bool, eps: float, seed: int,
                        cache: dict) -> tuple[dict, dict]:
    """A histogram mechanism's releases of the unit's own D over its real domain: each must be a histogram of
    that domain (the family's contract); the noise on its cells, on the side the clip at zero never touches
    (:func:`synth.audit.statistics.clipped_upper_excess`), must be discrete Laplace whose scale spends at most ε at the
    histogram's sensitivity under the declared relation (:func:`yardstick.detailed_sensitivity`), in every band
    of true counts (none, at least 1, 3, 10, 50), over the occupied cells and a sample of the empty ones."""
    spec = src.spec
    a = spec.audit
    D, _, workload, *_ = unit_instance(src, unit, wb, cache)
    m = D.domain.total_size
    backend = publication_noise(spec, seed, "histogram-real", unit, wb, eps)
    rng = np.random.default_rng(stable_seed("audit-histogram-real", seed, unit, wb, eps))
    info = {"unit": unit, "cells": int(m)}
    try:
        one = src.publish(mech, eps, D, workload, Draw(keyed_release(backend, 0), rng)).output
    except PrivacyError as e:
        return {"family_contract": f"not run: its release of the real domain could not be drawn here ({e})"}, info
    except Exception as e:  # noqa: BLE001 - a release that cannot be made as the family makes it breaks its contract
        return {"family_contract": f"fail: {mech} could not release the unit's own D as the histogram family does "
                                   f"({type(e).__name__}: {e})"}, info
    if not isinstance(one, SparseHistogram) or one.domain_size != m:
        return {"family_contract": contract_failure(mech, "histogram", f"a noisy histogram of the unit's {m} "
                                                     "cells (SparseHistogram)", one)}, info
    keys, counts = np.unique(D.keys(), return_counts=True)
    n_empty = min(2000, m - keys.size)
    empty = np.zeros(0, np.int64)
    while empty.size < n_empty:
        draw = rng.integers(0, m, 2 * n_empty + 16)
        empty = np.unique(np.concatenate([empty, draw[~np.isin(draw, keys)]]))[:n_empty]
    cols, truth = np.concatenate([keys, empty]), np.concatenate([counts, np.zeros(empty.size, np.int64)])
    out = src.publish(mech, eps, D, workload, Draw(backend, rng, runs=list(range(1, a.whole_releases + 1)))).output
    if isinstance(out, list):
        y = np.stack([lookup(h.keys, h.counts, cols, missing=0) for h in out])
    else:
        y = np.asarray(out)[:, cols]
    x = y - truth[None, :]
    x0 = np.where(truth > 0, 0, 1)[None, :]  # a count of 0 is seen above the clip from 1 up
    seen = x >= x0
    excess = (x - x0)
    delta = detailed_sensitivity(spec.relation)
    bands = {"band 0": truth == 0, **{f"band ≥ {b}": truth >= b for b in BANDS}}
    bands = {g: sel for g, sel in bands.items() if seen[:, sel].sum() >= MIN_GROUP_DRAWS}
    level = 1 - (1 - a.confidence) / max(len(bands), 1)
    spent = {g: delta / t if (t := geometric_scale_upper_exact(excess[:, sel][seen[:, sel]], level)) > 0 else math.inf
             for g, sel in bands.items()}
    worst = max(spent, key=spent.get) if spent else None
    pooled = excess[seen]
    p_shape = geometric_shape_pvalue(pooled)
    info.update(epsilon_from_noise_scale={g: round(v, 6) for g, v in spent.items()}, noise_shape_p_value=p_shape,
                releases=a.whole_releases, cells_checked=int(cols.size), sensitivity=delta)
    checks = {"family_contract": "pass"}
    checks["real_noise_scale"] = (
        "not run: too few draws above the clip" if worst is None else "pass" if spent[worst] <= eps else
        f"fail: on the unit's own D the histogram's noise spends ε ≥ {spent[worst]:.4g} ({worst}: the sensitivity "
        f"{delta} over an upper bound on its noise scale, from the draws above the clip at zero), over the declared "
        f"{eps:g}")
    checks["real_noise_shape"] = ("pass" if p_shape >= 1 - a.confidence else
                                  f"fail: on the unit's own D the histogram's noise is not discrete Laplace "
                                  f"(geometric above the clip: p = {p_shape:.2g})")
    return checks, info


def _smoothed_law_unit(src: AuditSource, mech: str, unit: str, wb: bool, eps: float, seed: int,
                       cache: dict) -> tuple[dict, dict]:
    """A smoothed histogram's releases of the unit's own D: each must be n draws of cells of the unit's domain (the
    family's contract); the share of draws in cells where D has nobody must reach what the mixing weight ε needs
    puts there (:func:`yardstick.smoothed_mixing`: δ·(cells D leaves empty)/m), or the data's own cells carry more
    weight than ε allows."""
    spec = src.spec
    a = spec.audit
    D, _, workload, *_ = unit_instance(src, unit, wb, cache)
    m, n = D.domain.total_size, len(D)
    rng = np.random.default_rng(stable_seed("audit-smoothed-real", seed, unit, wb, eps))
    info = {"unit": unit, "cells": int(m), "n": n}
    backend = publication_noise(spec, seed, "smoothed-real", unit, wb, eps)  # the family draws from rng; a release may not
    try:
        one = src.publish(mech, eps, D, workload, Draw(keyed_release(backend, 0), rng)).output
    except Exception as e:  # noqa: BLE001 - a release that cannot be made as the family makes it breaks its contract
        return {"family_contract": f"fail: {mech} could not release the unit's own D as the smoothed family does "
                                   f"({type(e).__name__}: {e})"}, info
    if not (isinstance(one, np.ndarray) and one.ndim == 1 and one.size == n and np.issubdtype(one.dtype, np.integer)
            and (one.size == 0 or (one.min() >= 0 and one.max() < m))):
        return {"family_contract": contract_failure(mech, "smoothed", f"{n} draws of cells of the unit's {m}", one)}, info
    draws = np.asarray(src.publish(mech, eps, D, workload, Draw(backend, rng, runs=a.whole_releases)).output).ravel()
    occupied = np.unique(D.keys())
    hits, total = int((~np.isin(draws, occupied)).sum()), int(draws.size)
    need = smoothed_mixing(eps, n, m, n) * (m - occupied.size) / m
    _, high = clopper_pearson(hits, total, 1 - a.confidence)
    info.update(draws=total, share_in_empty_cells=hits / max(total, 1), share_needed=need)
    checks = {"family_contract": "pass",
              "real_mixing": ("pass" if high >= need else
                              f"fail: on the unit's own D {hits:,} of its {total:,} draws fell in cells where nobody "
                              f"lives (at most {high:.3g} of them by a {a.confidence:.4g} bound), below the {need:.3g} "
                              f"ε = {eps:g} needs: the data's cells carry more weight than ε allows")}
    return checks, info


def audit_histogram(call: FamilyCall) -> AuditResult:
    """The ``histogram`` family: the real workload first (a release that is no histogram fails its contract), then
    the worst case on the small domain."""
    src, mech, eps = call.src, call.mechanism, call.epsilon
    real = [_histogram_law_unit(src, mech, u, call.with_block, eps, call.seed, call.cache) for u in call.units]
    return broken_contract(mech, eps, src.spec.audit.confidence, real) or with_real_law(
        _audit_perturbed(src, mech, eps, call.small, call.seed), real)


def audit_smoothed(call: FamilyCall) -> AuditResult:
    """The ``smoothed`` family: each unit's draws of its own D, then the worst case on the smallest domain."""
    src, mech, eps = call.src, call.mechanism, call.epsilon
    real = [_smoothed_law_unit(src, mech, u, call.with_block, eps, call.seed, call.cache) for u in call.units]
    return broken_contract(mech, eps, src.spec.audit.confidence, real) or with_real_law(
        _audit_smoothed(src, mech, eps, call.smallest, call.seed), real)


register_family(AuditFamily("histogram", (3, 2), audit_histogram,
                            "a noisy histogram: its bound, scale and shape on a small worst-case domain (both paths), "
                            "and the scale and shape of its releases of each unit's own D"))
register_family(AuditFamily("smoothed", (1, 1), audit_smoothed,
                            "draws from a smoothed histogram: its bound on the smallest domain, and the mixing of its "
                            "draws of each unit's own D"))
