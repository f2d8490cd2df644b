"""The checks every family shares: whole releases' noise laws, the replay, the structure, the accounting."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.seeds import stable_seed
from censusrecon.synth import registry
from censusrecon.synth.audit.neighbours import far_datasets, real_pairs
from censusrecon.synth.audit.measured import best_white_box
from censusrecon.synth.audit.source import AuditSource
from censusrecon.synth.audit.statistics import (
    AuditResult,
    ReplayNoise,
    check_state,
    gaussian_shape_pvalue,
    gaussian_sigma_upper_stats,
    independence_pvalue,
    laplace_scale_upper_stats,
    laplace_shape_pvalue,
    tail_pvalue,
    tail_threshold,
)
from censusrecon.synth.audit.yardstick import table_sensitivity
from censusrecon.synth.histogram import SparseHistogram
from censusrecon.synth.keyed import KeyedNoise
from censusrecon.synth.mechanism import PrivacyError, parse_relation
from censusrecon.synth.noise import OpenDPNoise
from censusrecon.synth.release import workload_counts
from censusrecon.synth.publishing import Draw


def publication_noise(spec, seed: int, *parts):
    """The noise of the releases the audit draws as publication draws them (whole releases, the structure, the
    replay): OpenDP's where the config publishes with it, else the keyed simulation noise publishing uses, under
    the audit's own key."""
    if spec.backend == "opendp":
        return OpenDPNoise()
    return bound_noise(seed, *parts)


def bound_noise(seed: int, *parts):
    """The noise of the statistical bound's many releases per neighbour (``release.audit.runs``, on the cells a pair
    touches): the audit's keyed discrete Laplace (Gaussian) whatever the backend, through the same publishing code.
    Under the simulation backend it is the publishing noise itself; under OpenDP, whose exact sampler takes about
    8 µs a draw (10⁵ releases of a pair's cells: minutes each), the sampler is what the whole releases, drawn
    through OpenDP, check: its scale, shape, tail and independence (:func:`publication_noise`)."""
    return KeyedNoise(stable_seed("audit-noise", seed, *parts))


@dataclass(frozen=True)
class Release:
    """One mechanism at one ε on one unit's D and published workload: what the structure and replay checks publish
    through the audit's door, with D or a neighbour in its place."""

    mech: str
    eps: float
    workload: object
    D: Dataset

    def publish(self, src: AuditSource, draw: Draw, data: Dataset | None = None):
        """A release of D (or of ``data``, a neighbour) through the mechanism's own publishing function."""
        return src.publish(self.mech, self.eps, self.D if data is None else data, self.workload, draw)


def structure_check(src: AuditSource, rel: Release, D2, batch: bool = False, key=None) -> str:
    """The shape of what is published must be the same for neighbours (``batch``: a release of one run through
    the mechanism's batch branch, for a fitted file: its tables; ``key``: a fit's key)."""
    spec = src.spec
    rng = np.random.default_rng(0)
    runs = [0] if batch else None
    try:
        s1 = rel.publish(src, Draw(publication_noise(spec, 0, "structure", 1), rng, key=key, runs=runs)).structure
        s2 = rel.publish(src, Draw(publication_noise(spec, 0, "structure", 2), rng, key=key, runs=runs), D2).structure
    except PrivacyError as e:
        return f"fail: {e}"
    return "pass" if s1 == s2 else "fail: the shape of the release differs between neighbours"


def replay_check(src: AuditSource, rel: Release, D2) -> str:
    """Release D; replay the same noisy counts for D and D′: what follows the noise must agree (a small
    domain's pair, over ``release.audit.replay_draws`` recorded releases)."""
    spec = src.spec
    source = registry.mechanism(rel.mech).fitted_to or rel.mech  # the synthetic rows are fitted to these counts
    values = []
    for i in range(spec.audit.replay_draws):
        first = src.publish(source, rel.eps, rel.D, rel.workload, Draw(publication_noise(spec, i, "replay"),
                                                                         np.random.default_rng(0)))
        if isinstance(first.output, SparseHistogram):
            v = np.zeros(first.output.domain_size, dtype=np.int64)
            v[first.output.keys] = first.output.counts
        else:
            v = first.output.counts
        values.append(v)
    far = far_datasets(rel.D, spec.audit.replay_far, np.random.default_rng(stable_seed("audit-far", len(rel.D), rel.mech)))
    return replay_pairs(src, rel, [("the audit's pair", D2)] + far, values)


def replay_pairs(src: AuditSource, rel: Release, pairs: list, values: list, batch: bool = False, key=None) -> str:
    """For each recorded release ``values`` (noisy counts), publish D and every neighbour of ``pairs``
    replaying them: answers, rows and totals must be identical (the release reads the data only through
    its noisy counts). ``batch``: through the mechanism's batch branch, a release of one run (a fitted file's
    tables, without fitting them: the fit's own replay is separate); ``key``: a fit's key."""
    runs = [0] if batch else None
    for v in values:
        try:
            p1 = rel.publish(src, Draw(ReplayNoise(v), np.random.default_rng(1), key=key, runs=runs))
        except PrivacyError as e:
            return f"fail: {e}"
        for what, D2 in pairs:
            try:
                p2 = rel.publish(src, Draw(ReplayNoise(v), np.random.default_rng(1), key=key, runs=runs), D2)
            except PrivacyError as e:
                return f"fail: {e} ({what})"
            same = np.array_equal(p1.answers, p2.answers) and (
                not isinstance(p1.output, Dataset) or np.array_equal(p1.output.codes, p2.output.codes)) and (
                not batch or np.array_equal(p1.output.counts, p2.output.counts))
            t1, t2 = getattr(p1.output, "total", None), getattr(p2.output, "total", None)
            if not same or t1 != t2:
                return ("fail: with the same noisy counts, the neighbours' releases differ "
                        f"(totals {t1} and {t2}; {what}): the release reads the data beyond its noisy counts")
    return "pass"


def noise_epsilon(noise: np.ndarray, distance: np.ndarray, confidence: float) -> tuple[float, float]:
    """The ε the noise really added spends for a pair: Σ_c |Δ_c| / t_c over the differing cells, each
    cell's discrete Laplace scale t_c bounded above from its own draws (so one table noised for a
    larger ε shows, even among many), at ``confidence`` jointly (Bonferroni over cells): exactly where the draws are
    few (a cell drawn 10 times at ε = 8 is often 0 each time, which a normal bound takes for no noise at all). Returns
    the ε and the smallest scale bound."""
    noise = np.asarray(noise, dtype=np.float64)
    n, k = noise.shape
    level = 1 - (1 - confidence) / max(k, 1)
    scales = np.array([laplace_scale_upper_stats(n, a, q, level)
                       for a, q in zip(np.abs(noise).sum(axis=0), (noise * noise).sum(axis=0))])
    with np.errstate(divide="ignore"):
        eps = float(np.sum(np.where(scales > 0, distance / scales, np.inf)))
    return eps, float(scales.min())


def with_real_law(res: AuditResult, per_unit: list[tuple[dict, dict]]) -> AuditResult:
    """A small-domain audit's result with the checks of the same mechanism's releases of every audited unit's own
    D on the real workload (:func:`_histogram_law_unit`, :func:`_smoothed_law_unit`): a unit's failure, then a check
    it could not run, stands for all; each unit's figures kept."""
    checks = dict(res.checks)
    rank = {"fail": 3, "not run": 2, "pass": 1, "informational": 0}
    for unit_checks, info in per_unit:
        for k, v in unit_checks.items():
            state = check_state(v)
            if k not in checks or rank[state] > rank[check_state(checks[k])]:
                checks[k] = f"{v} [{info.get('unit')}]" if state in ("fail", "not run") else v
    details = dict(res.details, real_workload={str(info.get("unit")): info for _, info in per_unit})
    return dataclasses.replace(res, checks=checks, details=details)


def broken_contract(mech: str, eps: float, confidence: float, per_unit: list[tuple[dict, dict]]) -> AuditResult | None:
    """A failed result when a unit's release does not fit the family's contract (the family's own audit, which
    assumes it, is not run); None when every unit's does."""
    if all(check_state(c.get("family_contract", "pass")) != "fail" for c, _ in per_unit):
        return None
    empty = AuditResult(mech, eps, 0.0, 0, confidence, "none", {}, {})
    return with_real_law(empty, per_unit)


def contract_failure(mech: str, family: str, wants: str, got) -> str:
    return (f"fail: {mech} is registered in the {family} audit family, whose releases are {wants}; on the real "
            f"workload it published {type(got).__name__}{getattr(got, 'shape', '') and f' of shape {got.shape}'}: the "
            "family does not check what it publishes (register it with the family that does)")


#: Lower ends of the bands of true counts whose noise is bounded apart (nested: "at least b" and "0").
BANDS = (1, 3, 10, 50)


#: The fewest draws of a group whose noise bounds a measurement's scale (its cells are in larger groups too).
MIN_GROUP_DRAWS = 200


def band_groups(exact: np.ndarray) -> dict:
    """Cells by their true counts: none, and at least 1, 3, 10, 50 (nested, so each band has as many draws
    as it can): a scale that depends on the data shows as one band noised less than the others."""
    x = np.asarray(exact)
    return {"band 0": x == 0, **{f"band ≥ {b}": x >= b for b in BANDS}}


@dataclass(frozen=True)
class WholeNoise:
    """The noise of whole releases as the checks read it: ``groups``, (measurement, group) -> (n, Σ|x|, Σx²);
    ``shape_sample``, draws for the shape test; ``tail_draws``, sets of draws for the far-tail test; ``indep``, one
    row per release of the cells followed for independence; ``tail_stats``, more draws of the same noise
    (:func:`release_tail_stats` of the pairs' releases, far more than whole releases hold), for a far-tail test that
    reaches deeper (a clip at 10 scales shows)."""

    groups: dict
    shape_sample: np.ndarray
    tail_draws: list
    indep: np.ndarray
    tail_stats: list | None = None


def whole_checks(spec, noise: WholeNoise, sensitivity: dict, gaussian: bool, budget: float) -> tuple[dict, dict]:
    """The checks over whole releases (``noise``, :class:`WholeNoise`). ``sensitivity``: measurement -> the most one
    person moves its cells (L1; for 0/1 cells also the squared L2), found by the audit. Each measurement's noise is
    bounded above by its least-noised group (a node, a table, a band of true counts), so ε (ρ) from noise = Σ Δ / t
    (Δ / 2σ²) must not exceed ``budget``."""
    groups, shape_sample, tail_draws, indep, tail_stats = (noise.groups, noise.shape_sample, noise.tail_draws,
                                                           noise.indep, noise.tail_stats)
    a = spec.audit
    level = 1 - (1 - a.confidence) / max(len(groups), 1)
    per_meas: dict = {}
    for (meas, group), (n, sa, sq) in groups.items():
        if n < MIN_GROUP_DRAWS and any(m == meas and k[1] != group and v[0] >= MIN_GROUP_DRAWS
                                       for k, v in groups.items() for m in [k[0]]):
            continue  # too few draws for a trustworthy bound; its cells are in larger groups
        t = gaussian_sigma_upper_stats(n, sq, level) if gaussian else laplace_scale_upper_stats(n, sa, sq, level)
        if meas not in per_meas or t < per_meas[meas][0]:
            per_meas[meas] = (t, group, n)
    spent, details = 0.0, {}
    for meas, (t, group, _) in per_meas.items():
        d = sensitivity[meas]
        e = (d / (2 * t * t) if gaussian else d / t) if t > 0 else math.inf
        spent += e
        details[str(meas)] = {"sensitivity": d, "least_noised_group": str(group), "scale_upper": round(t, 6),
                              ("rho" if gaussian else "epsilon") + "_at_least": round(e, 6)}
    what = "ρ" if gaussian else "ε"
    checks = {"noise_scale": "pass" if spent <= budget else
              f"fail: the noise added spends {what} ≥ {spent:.4g} (each measurement's sensitivity over an upper bound "
              f"on the noise of its least-noised node, table or band of true counts, summed), over the declared "
              f"{budget:.4g} (assumes discrete {'Gaussian' if gaussian else 'Laplace'} noise, which noise_shape checks)"}
    p_shape = gaussian_shape_pvalue(shape_sample) if gaussian else laplace_shape_pvalue(shape_sample)
    p_tails = [tail_pvalue(x, gaussian) for x in tail_draws] + ([tail_from_stats(tail_stats, gaussian)]
                                                                if tail_stats else [])
    p_tail = min(1.0, len(p_tails) * min(p_tails)) if p_tails else 1.0  # Bonferroni over the draws' sets
    family = "Gaussian" if gaussian else "Laplace"
    checks["noise_shape"] = ("pass" if p_shape >= 1 - a.confidence else
                             f"fail: the noise added is not discrete {family} (chi-square over its whole range, "
                             f"p = {p_shape:.2g})")
    checks["noise_tail"] = ("pass" if p_tail >= 1 - a.confidence else
                            f"fail: the noise added has too few draws in its far tail for discrete {family} noise "
                            f"(p = {p_tail:.2g}): it is cut off (truncated or clipped)")
    p_ind, where = independence_pvalue(indep)
    checks["noise_independence"] = ("pass" if p_ind >= 1 - a.confidence else
                                    f"fail: the noise is not independent across cells, nodes or releases ({where}: "
                                    f"p = {p_ind:.2g}); correlated or reused noise")
    info = {("rho" if gaussian else "epsilon") + "_from_noise_scale": round(spent, 6), "per_measurement": details,
            "noise_shape_p_value": p_shape, "noise_tail_p_value": p_tail, "independence_p_value": p_ind,
            "whole_releases": a.whole_releases, "noise_draws": int(sum(v[2] for v in per_meas.values()))}
    return checks, info


#: Most noise columns the independence check correlates pairwise (every pair of them).
INDEPENDENCE_COLUMNS = 4000


def independence_columns(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The columns the independence check correlates: all of them up to :data:`INDEPENDENCE_COLUMNS`, else
    that many: every column sharing its cell label with another (a table cell of two blocks), then at
    random."""
    c = len(labels)
    if c <= INDEPENDENCE_COLUMNS:
        return np.arange(c)
    _, inv, counts = np.unique(labels, return_inverse=True, return_counts=True)
    shared = np.flatnonzero(counts[inv] > 1)
    pick = shared if shared.size <= INDEPENDENCE_COLUMNS // 2 else rng.choice(shared, INDEPENDENCE_COLUMNS // 2,
                                                                                replace=False)
    rest = np.setdiff1d(np.arange(c), pick)
    more = rng.choice(rest, min(rest.size, INDEPENDENCE_COLUMNS - pick.size), replace=False)
    return np.sort(np.concatenate([pick, more]))


def unit_instance(src: AuditSource, unit: str, wb: bool, cache: dict) -> tuple:
    """A unit's real instance, the same at every ε of one audit: D, its areas, the published workload, D's
    exact counts, the real pairs with their counts, and the tables' sensitivity under the declared relation
    (the audit's own yardstick, by brute force over the unit's neighbours: never the release's)."""
    spec = src.spec
    key = (unit, wb)
    if key not in cache:
        prob = src.prepare(unit, wb, pad_blocks=False)
        D, areas = prob.private, prob.areas
        workload = src.workload(spec.published, D.domain, areas)
        exact = workload_counts(D, workload)
        pairs = real_pairs(D, workload, parse_relation(spec.relation), areas)
        cache[key] = (D, areas, workload, exact, pairs, [workload_counts(D2, workload) for _, D2 in pairs],
                      table_sensitivity(workload, D.codes, spec.relation))
    return cache[key]


def keyed_release(backend, release: int):
    """The backend that draws release ``release`` of the audit's key as a single release (OpenDP's: itself)."""
    return KeyedNoise(backend.seed, release) if getattr(backend, "keyed", False) else backend


def opendp_accounting(budgets, gaussian: bool, total, sensitivity) -> tuple[str, dict]:
    """Every measurement's privacy map from OpenDP (:class:`synth.noise.OpenDPNoise`'s) at the scale it was
    drawn with and the sensitivity the audit's yardstick finds for it (``sensitivity(budget)``; never the one
    the release records): pure ε, the discrete Laplace map at that scale and L1 sensitivity; zCDP, the discrete
    Gaussian map at unit L2 distance times the squared L2 sensitivity (the map is quadratic in the distance).
    Their sum must not exceed the budget, nor may the release's own record (OpenDP's maps at the sensitivities it
    records, which must not be below the yardstick's, and must agree with its own sum)."""
    try:
        lib = OpenDPNoise()
    except PrivacyError:
        return "not run: OpenDP is not installed (pip install 'censusrecon[dp]')", {}

    def spent(b, d):
        return lib.gaussian_rho_map(b.scale, 1) * d if gaussian else lib.privacy_map(b.scale, int(d))

    ours, recorded, theirs, under = 0.0, 0.0, 0.0, []
    for b in budgets:
        d = sensitivity(b)
        if not d and not b.sensitivity:
            continue
        theirs += spent(b, d) if d else 0.0
        if b.sensitivity:
            recorded += spent(b, b.sensitivity)
            ours += float(b.spent())
        if b.sensitivity < d:
            under.append(f"{b.level}/{b.query} {b.sensitivity} < {d}")
    what = "ρ" if gaussian else "ε"
    info = {f"opendp_{'rho' if gaussian else 'epsilon'}": theirs, f"exact_{'rho' if gaussian else 'epsilon'}": ours}
    if theirs > float(total) * (1 + 1e-9):
        return (f"fail: OpenDP's privacy maps at the tables' sensitivities add up to {what} = {theirs:.6g}, over the "
                f"budget {float(total):.6g}" + (f" (the release records sensitivities below them: {', '.join(under)})"
                                                if under else "")), info
    if under:
        return f"fail: the release records sensitivities below the tables': {', '.join(under)}", info
    if recorded > float(total) * (1 + 1e-9):  # its own ledger over the budget, whatever the tables' sensitivities
        return (f"fail: the release's own record spends {what} = {recorded:.6g} by OpenDP's maps, over the budget "
                f"{float(total):.6g} that ε = the declared one allows"), info
    if abs(recorded - ours) > 1e-6 * max(ours, 1e-12):
        return f"fail: OpenDP's maps give {what} = {recorded:.6g} for the release's record, its own sum {ours:.6g}", info
    return "pass", info


def shape_subsample(draws: np.ndarray, rng: np.random.Generator, cap: int = 200_000) -> np.ndarray:
    """At most ``cap`` of one release's noise draws for the shape test, drawn WITHOUT replacement: a draw
    taken twice counts twice in the chi-square's bins, which then vary about twice as much as the test
    assumes when the release has barely more than ``cap`` draws (a level of 7 block groups x 29,232 types:
    correct discrete Laplace noise failed at p = 4e-11, 2026-12-03)."""
    flat = np.asarray(draws).ravel()
    return flat if flat.size <= cap else flat[rng.choice(flat.size, cap, replace=False)]


def release_tail_stats(x: np.ndarray, gaussian: bool) -> tuple:
    """One release's noise of one measurement for the far-tail test: (n, Σ|x|, Σx², the |x| of its largest
    draws): enough to count, after all releases, the draws beyond the threshold the fitted law sets."""
    a = np.abs(np.asarray(x, dtype=np.int64)).ravel()
    top = np.partition(a, a.size - 200)[-200:] if a.size > 200 else a  # the largest 200, in no order: only counted
    af = a.astype(np.float64)
    return a.size, float(a.sum()), float(af @ af), top


def tail_from_stats(stats: list, gaussian: bool, expected: float = 30.0) -> float:
    """:func:`synth.audit.statistics.tail_pvalue` over releases summarised by :func:`release_tail_stats` (each keeps its 200
    largest |x|, more than the threshold's expected count per release)."""
    from scipy.stats import poisson

    n = sum(s[0] for s in stats)
    t = tail_threshold(n, sum(s[1] for s in stats) / max(n, 1), sum(s[2] for s in stats) / max(n, 1), gaussian,
                       expected)
    if t is None:
        return 1.0
    k, p_tail = t
    return float(poisson.cdf(sum(int((s[3] >= k).sum()) for s in stats), n * p_tail))


def combine_units(mech: str, eps: float, results: list) -> AuditResult:
    """One result for a mechanism at one ε from its audits per unit (or root): the largest bound, every
    unit's failed checks, details per unit."""
    worst = max(results, key=lambda x: x.epsilon_lower_bound)
    checks = {}
    rank = {"fail": 3, "not run": 2, "pass": 1, "informational": 0}  # a unit's failure, then a check it could not run
    for res in results:
        unit = res.details.get("unit") or res.details.get("root")
        for k, v in res.checks.items():
            state = check_state(v)
            if k not in checks or rank[state] > rank[check_state(checks[k])]:
                checks[k] = f"{v} [{unit}]" if state in ("fail", "not run") else v
    details = {"per_unit": {str(x.details.get("unit") or x.details.get("root")): x.as_dict() for x in results},
               "event_unit": str(worst.details.get("unit") or worst.details.get("root"))}
    boxes = [x.details.get("white_box") for x in results if x.details.get("white_box")]
    if boxes:  # the unit whose noise was shown to spend the most (its share of what is declared)
        details["white_box"] = best_white_box(boxes).as_dict()
    else:
        why = next((x.details["white_box_why_not"] for x in results if x.details.get("white_box_why_not")), None)
        if why:
            details["white_box_why_not"] = why
    needed = [x.details["runs_to_certify"] for x in results if x.details.get("runs_to_certify")]
    if needed:  # the releases per neighbour that would let the bound certify ε on every unit
        details["runs_to_certify"] = max(needed)
    return AuditResult(mech, eps, worst.epsilon_lower_bound, worst.runs, worst.confidence, worst.event, checks, details)
