"""Empirical ε auditor: a Clopper–Pearson lower bound on ε from many releases on neighbouring datasets."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.optimize import brentq
from scipy.stats import beta, binom, chi2, nbinom, norm, poisson

from censusrecon.synth.mechanism import PrivacyError, Relation, parse_relation


def check_state(value: str) -> str:
    """What one audit check's value says: ``pass``; ``not run`` (it could have failed but did not run: the
    audit is inconclusive); ``informational`` (a declared invariant, or nothing to check: "not
    applicable: why"); else ``fail``.

    >>> [check_state(v) for v in ("pass", "not run: x", "not applicable: x", "declared invariant: x", "fail: x")]
    ['pass', 'not run', 'informational', 'informational', 'fail']
    """
    v = str(value)
    if v == "pass":
        return "pass"
    if v.startswith("not run"):
        return "not run"
    if v.startswith(("declared", "not applicable")):
        return "informational"
    return "fail"


@dataclass(frozen=True)
class AuditResult:
    """What an audit certified: with probability ``confidence``, the mechanism's ε is at least
    ``epsilon_lower_bound``. ``checks`` are named pass/fail checks run beside the statistics
    (a failed one means ε = ∞: the two neighbours are told apart with certainty)."""

    mechanism: str
    declared_epsilon: float
    epsilon_lower_bound: float
    runs: int
    confidence: float
    event: str
    checks: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        """``failed`` (the bound exceeds the declared ε, or a check failed), ``inconclusive`` (no check
        failed but one that could have did not run: "not run: why", e.g. too few releases for the bound to
        certify the declared ε and no noise check to stand in), else ``passed``: every check that applies
        ran and passed. Checks with nothing to check ("not applicable: why") and declared invariants
        ("declared …") do not count either way; :meth:`checks_summary` names them."""
        if self.epsilon_lower_bound > self.declared_epsilon or self.failed_checks():
            return "failed"
        return "inconclusive" if self.unchecked() else "passed"

    @property
    def passed(self) -> bool:
        """Every applicable check ran and passed and the bound stays at or below the declared ε
        (:attr:`outcome` is ``passed``; an inconclusive audit is not a passed one)."""
        return self.outcome == "passed"

    def failed_checks(self) -> dict:
        return {k: v for k, v in self.checks.items() if check_state(v) == "fail"}

    def unchecked(self) -> dict:
        """The checks that could have failed but did not run ("not run: why")."""
        return {k: v for k, v in self.checks.items() if check_state(v) == "not run"}

    def checks_summary(self) -> str:
        """What was checked, exactly: "FAILED name: why" for failed checks, else the checks that
        passed, then "NOT RUN name: why" for each that could have failed and did not, then each
        declared or not-applicable check with its reason (never "all pass" for those).

        >>> AuditResult("m", 1.0, 0.5, 10, 0.95, "e", {"a": "pass", "b": "not applicable: one block"}).checks_summary()
        'pass: a; b not applicable: one block'
        >>> AuditResult("m", 1.0, 0.5, 10, 0.95, "e", {"a": "pass", "c": "not run: 10 runs"}).checks_summary()
        'pass: a; NOT RUN c: 10 runs'
        """
        failed = self.failed_checks()
        if failed:
            return "FAILED " + "; ".join(f"{k}: {v}" for k, v in failed.items())
        passed = [k for k, v in self.checks.items() if v == "pass"]
        missing = [f"NOT RUN {k}: {v.removeprefix('not run').lstrip(': ')}" for k, v in self.unchecked().items()]
        rest = [f"{k} {v}" for k, v in self.checks.items() if check_state(v) == "informational"]
        return "; ".join(([f"pass: {', '.join(passed)}"] if passed else []) + missing + rest) or "no checks"

    @property
    def measured(self) -> dict:
        """The measured ε beside the declared one: the black box (:attr:`epsilon_lower_bound`), the white box from
        the noise the code added where its law allows (``details["white_box"]``), the larger, its share of the
        declared ε (:func:`synth.audit.measured.measured_summary`)."""
        from censusrecon.synth.audit.measured import measured_summary

        return measured_summary(self)

    def as_dict(self) -> dict:
        return {"mechanism": self.mechanism, "declared_epsilon": self.declared_epsilon,
                "epsilon_lower_bound": self.epsilon_lower_bound, "runs": self.runs,
                "confidence": self.confidence, "event": self.event, "checks": dict(self.checks),
                "passed": self.passed, "outcome": self.outcome, **self.details, "measured": self.measured}


def overall_outcome(results: list) -> str:
    """One audit's outcome from its results: failed if any failed, else inconclusive if any is, else passed.

    >>> ok = AuditResult("m", 1.0, 0.1, 10, 0.95, "e", {})
    >>> short = AuditResult("m", 1.0, 0.1, 10, 0.95, "e", {"a": "not run"})
    >>> bad = AuditResult("m", 1.0, 2.0, 10, 0.95, "e")
    >>> overall_outcome([ok, short]), overall_outcome([ok]), overall_outcome([short, bad])
    ('inconclusive', 'passed', 'failed')
    """
    outcomes = {r.outcome for r in results}
    return next((o for o in ("failed", "inconclusive") if o in outcomes), "passed")


def clopper_pearson(successes, trials: int, alpha: float):
    """Two one-sided (1 - alpha) Clopper–Pearson bounds on a binomial proportion (arrays too)."""
    s = np.asarray(successes, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = np.where(s == 0, 0.0, beta.ppf(alpha, np.maximum(s, 1), trials - s + 1))
        hi = np.where(s == trials, 1.0, beta.ppf(1 - alpha, s + 1, np.maximum(trials - s, 1)))
    if np.ndim(successes) == 0:
        return float(lo), float(hi)
    return lo, hi


def neighbouring_counts(relation: Relation | str, cells: int, base: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """A worst-case pair of neighbouring count vectors under ``relation``.

    replace-one: one person moves from cell 0 to cell 1; add/remove: one person is added
    to cell 0. Other cells hold ``base`` persons each (their value does not matter for
    additive noise; it keeps every count positive).
    """
    relation = parse_relation(relation)
    d = np.full(cells, base, dtype=np.int64)
    d2 = d.copy()
    if relation is Relation.REPLACE_ONE:
        if cells < 2:
            raise PrivacyError("replace-one neighbours need at least two cells")
        d2[0] -= 1
        d2[1] += 1
    else:
        d2[0] += 1
    return d, d2


def _event_counts(z: np.ndarray, thresholds) -> tuple[np.ndarray, np.ndarray]:
    """For each threshold t, how many runs have at least j coordinates with z ≥ t (``up``, j = 1..c)
    and at least j with z ≤ t (``down``). Returns two (len(thresholds), c) arrays of run counts."""
    c = z.shape[1]
    up, down = [], []
    for t in thresholds:
        for out, n_i in ((up, (z >= t).sum(axis=1)), (down, (z <= t).sum(axis=1))):
            hist = np.bincount(n_i, minlength=c + 1)
            out.append(np.cumsum(hist[::-1])[::-1][1:])  # runs with at least j, j = 1..c
    return np.array(up), np.array(down)


#: Quantiles of the selection half's outputs that become thresholds, the extremes included.
THRESHOLD_QUANTILES = np.linspace(0.0, 1.0, 41)


def scaled_thresholds(z1: np.ndarray, z2: np.ndarray, base) -> list[int]:
    """The thresholds of the events: the fixed offsets ``base`` around the reference, and the
    integer quantiles of both neighbours' outputs (selection half), from their minimum to their
    maximum. So the events span the whole range where the two output distributions differ, at
    the noise's own scale whatever it is, and reach its edges: noise of bounded support (ε = ∞)
    makes "z ≥ the largest value seen" possible under one neighbour only, which the bound itself
    then catches."""
    pooled = np.concatenate([np.asarray(z1).ravel(), np.asarray(z2).ravel()])
    if not pooled.size:
        return sorted(set(base))
    qs = np.quantile(pooled, THRESHOLD_QUANTILES, method="nearest")
    return sorted(set(int(t) for t in base) | set(int(round(q)) for q in qs))


def audit_outputs(y1: np.ndarray, y2: np.ndarray, reference: np.ndarray, direction: np.ndarray,
                  declared_epsilon: float, name: str, confidence: float = 0.95,
                  thresholds=range(-3, 7), checks: dict | None = None, details: dict | None = None) -> AuditResult:
    """Lower-bound ε from releases ``y1`` (runs × c outputs) on D and ``y2`` on its neighbour D′.

    The c outputs are those where D and D′ differ (the cells a person moves out of and into);
    ``direction`` is +1 where D′'s value is higher, -1 where it is lower, and z = direction ·
    (y − reference). The events are "at least j of the c outputs have z ≥ t" (likelier under D′)
    and "at least j have z ≤ t" (likelier under D), for every j and every threshold t (the fixed
    offsets ``thresholds`` and the quantiles of the selection half, :func:`scaled_thresholds`): for
    independent discrete Laplace noise, the number of outputs beyond the reference is a
    sufficient statistic, so these events reach the whole privacy loss even when a person moves
    dozens of cells (a rectangle "every output beyond t" would need all of them at once, which
    no feasible number of runs sees). The best event on one half of the runs is certified on the
    other: with Clopper–Pearson bounds, ε ≥ log(P_lo(E|likely) / P_hi(E|other)) at the stated
    confidence. A correct ε-DP mechanism stays at or below ε (but for the 1 − confidence chance).
    """
    y1, y2 = np.asarray(y1), np.asarray(y2)
    if y1.ndim != 2 or y1.shape != y2.shape:
        raise PrivacyError(f"outputs must be two (runs × outputs) arrays of one shape, got {y1.shape}, {y2.shape}")
    if y1.shape[1] == 0:
        raise PrivacyError("the two datasets release nothing different; nothing to audit")
    ref = np.asarray(reference)
    dirn = np.sign(np.asarray(direction))
    runs = y1.shape[0]
    half = runs // 2
    alpha = (1 - confidence) / 2
    t_list = list(thresholds)

    def bounds(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            lo, _ = clopper_pearson(a, n, alpha)
            _, hi = clopper_pearson(b, n, alpha)
            return np.where(lo > 0, np.log(lo / hi), -np.inf)

    z1 = dirn[None, :] * (y1 - ref[None, :])
    z2 = dirn[None, :] * (y2 - ref[None, :])
    t_list = scaled_thresholds(z1[:half], z2[:half], t_list)  # chosen on the selection half only
    up1, down1 = _event_counts(z1[:half], t_list)
    up2, down2 = _event_counts(z2[:half], t_list)
    score_up = bounds(up2, up1, half)  # "z ≥ t at j outputs" is likelier under D′
    score_down = bounds(down1, down2, half)  # "z ≤ t at j outputs" is likelier under D
    best = max(((score_up, +1), (score_down, -1)), key=lambda s: np.max(s[0]))
    score, sign = best
    proj = _projection_event(z1[:half], z2[:half], bounds, half) if y1.shape[1] > 1 else None
    if proj is not None and proj[0] > np.max(score):  # a linear combination separates them better
        _, w, t_p, sign_p = proj
        p1, p2 = z1[half:] @ w, z2[half:] @ w
        a_hits, b_hits = ((p2 >= t_p).sum(), (p1 >= t_p).sum()) if sign_p > 0 else ((p1 <= t_p).sum(), (p2 <= t_p).sum())
        eps = float(bounds(np.array([a_hits]), np.array([b_hits]), runs - half)[0])
        what = (f"a linear combination of the {y1.shape[1]} outputs (discriminant fitted on the selection half) "
                f"{'≥' if sign_p > 0 else '≤'} {t_p:.4g} (towards {'D′' if sign_p > 0 else 'D'})")
        return AuditResult(name, declared_epsilon, max(0.0, eps) if np.isfinite(eps) else 0.0, runs, confidence, what,
                           dict(checks or {}), dict(details or {}))
    if not np.isfinite(np.max(score)):
        return AuditResult(name, declared_epsilon, 0.0, runs, confidence, "none", dict(checks or {}), dict(details or {}))
    ti, ji = np.unravel_index(np.argmax(score), score.shape)
    t, j = t_list[ti], ji + 1
    n = runs - half
    u1, d1 = _event_counts(z1[half:], [t])
    u2, d2 = _event_counts(z2[half:], [t])
    a_hits, b_hits = (u2[0, ji], u1[0, ji]) if sign > 0 else (d1[0, ji], d2[0, ji])
    eps = float(bounds(np.array([a_hits]), np.array([b_hits]), n)[0])
    what = f"at least {j} of {y1.shape[1]} outputs {'≥' if sign > 0 else '≤'} reference {t:+d} (towards {'D′' if sign > 0 else 'D'})"
    return AuditResult(name, declared_epsilon, max(0.0, eps) if np.isfinite(eps) else 0.0, runs, confidence, what,
                       dict(checks or {}), dict(details or {}))


def _projection_event(z1: np.ndarray, z2: np.ndarray, bounds, n: int):
    """DP-Sniper-style events on the selection half: Fisher's discriminant w = S⁻¹(μ₂ − μ₁) of the two
    neighbours' outputs (S their pooled covariance, with a small ridge), and the threshold on w·z whose
    event separates them most (its lower bound on ε). Correlated noise (a difference of outputs with no
    noise in it) shows here where events on single outputs cannot. Returns (score, w, t, sign) or None."""
    z1, z2 = np.asarray(z1, dtype=np.float64), np.asarray(z2, dtype=np.float64)
    d = z2.mean(0) - z1.mean(0)
    if not np.any(d):
        return None
    cov = (np.cov(z1, rowvar=False) + np.cov(z2, rowvar=False)) / 2
    cov = np.atleast_2d(cov)
    ridge = 1e-9 * max(float(np.trace(cov)) / len(cov), 1e-12)
    w = np.linalg.solve(cov + ridge * np.eye(len(cov)), d)
    p1, p2 = z1 @ w, z2 @ w
    ts = np.unique(np.quantile(np.concatenate([p1, p2]), THRESHOLD_QUANTILES))
    up = bounds(np.array([(p2 >= t).sum() for t in ts]), np.array([(p1 >= t).sum() for t in ts]), n)
    down = bounds(np.array([(p1 <= t).sum() for t in ts]), np.array([(p2 <= t).sum() for t in ts]), n)
    i_up, i_down = int(np.argmax(up)), int(np.argmax(down))
    if up[i_up] >= down[i_down]:
        return float(up[i_up]), w, float(ts[i_up]), +1
    return float(down[i_down]), w, float(ts[i_down]), -1


def audit(release: Callable[[np.ndarray, int], np.ndarray], d: np.ndarray, d2: np.ndarray, declared_epsilon: float,
          name: str, runs: int = 200_000, confidence: float = 0.95, reference: np.ndarray | None = None,
          thresholds=range(-3, 7)) -> AuditResult:
    """:func:`audit_outputs` for a mechanism over count vectors: ``release(counts, runs)`` returns a
    (runs × cells) integer array, one release per row, aligned with ``counts``. The audited
    outputs are the cells where ``d`` and ``d2`` differ; thresholds are offsets from
    ``reference`` (default ``d``, right for noisy counts)."""
    d, d2 = np.asarray(d, dtype=np.int64), np.asarray(d2, dtype=np.int64)
    idx = np.flatnonzero(d2 - d)
    if idx.size == 0:
        raise PrivacyError("the two datasets are identical; nothing to audit")
    ref = d if reference is None else np.asarray(reference, dtype=np.int64)
    y1 = np.asarray(release(d, runs))[:, idx]
    y2 = np.asarray(release(d2, runs))[:, idx]
    return audit_outputs(y1, y2, ref[idx], (d2 - d)[idx], declared_epsilon, name, confidence, thresholds)


class ReplayNoise:
    """A noise backend that releases ``values`` whatever the counts: as if the noise drawn were
    exactly values − counts, a draw any neighbour has too. Releasing two neighbouring datasets
    through it yields the same noisy counts, so everything published after them (answers, totals,
    synthetic rows) must come out identical; a difference means the release reads the data (its
    n, its block list) by some other way than through the noisy counts."""

    name = "replay (audit only)"
    for_publication = False

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.asarray(values, dtype=np.int64)

    def add(self, counts: np.ndarray, scale: float) -> np.ndarray:
        if np.size(counts) != self.values.size:
            raise PrivacyError(f"replayed release has {self.values.size} cells, the counts {np.size(counts)}: "
                               "the shape of the release depends on the data")
        return self.values.reshape(np.shape(counts)).copy()

    add_gaussian = add

    def sample(self, scale: float, size: int) -> np.ndarray:
        raise PrivacyError("the replay backend only replays a release")


class RecordingNoise:
    """Wraps a backend and keeps every noisy array it returns, in order (to replay them)."""

    def __init__(self, backend) -> None:
        self.backend, self.values = backend, []
        self.name, self.for_publication = backend.name, False

    def add(self, counts: np.ndarray, scale: float) -> np.ndarray:
        out = self.backend.add(counts, scale)
        self.values.append(np.array(out, copy=True))
        return out

    def add_gaussian(self, counts: np.ndarray, sigma: float) -> np.ndarray:
        out = self.backend.add_gaussian(counts, sigma)
        self.values.append(np.array(out, copy=True))
        return out


class ReplaySequence:
    """A backend that returns recorded noisy arrays in the order they were drawn (:class:`ReplayNoise`
    for a release that calls its backend several times, as TopDown does per level and query)."""

    name = "replay (audit only)"
    for_publication = False

    def __init__(self, values: list[np.ndarray]) -> None:
        self.values, self.i = [np.asarray(v, dtype=np.int64) for v in values], 0

    def add(self, counts: np.ndarray, scale: float) -> np.ndarray:
        if self.i >= len(self.values):
            raise PrivacyError("the release draws more noisy arrays for one dataset than for its neighbour")
        v = self.values[self.i]
        self.i += 1
        if np.size(counts) != v.size:
            raise PrivacyError(f"replayed measurement has {v.size} cells, the counts {np.size(counts)}: "
                               "the shape of the release depends on the data")
        return v.reshape(np.shape(counts)).copy()

    add_gaussian = add


def laplace_scale_upper(noise: np.ndarray, confidence: float = 0.95) -> float:
    """An upper confidence bound on the scale t of discrete Laplace noise from its draws: the mean
    absolute draw is 2r/(1 − r²) with r = e^{−1/t}, increasing in t; its upper bound (normal
    approximation, the draws being many) is solved for r. Used to check the noise a release
    really adds against the noise its ε needs (a model-based check: it assumes the noise is
    discrete Laplace, which the statistical events do not)."""
    a = np.abs(np.asarray(noise, dtype=np.float64)).ravel()
    if a.size < 2:
        raise PrivacyError("need at least two noise draws to bound their scale")
    z = _normal_quantile(confidence)
    m = a.mean() + z * a.std(ddof=1) / math.sqrt(a.size)
    if m <= 0:
        return 0.0
    r = (math.sqrt(1.0 + m * m) - 1.0) / m
    return -1.0 / math.log(r) if 0 < r < 1 else math.inf


def gaussian_sigma_upper(noise: np.ndarray, confidence: float = 0.95) -> float:
    """An upper confidence bound on σ of (discrete) Gaussian noise from its draws: the chi-square
    bound on the variance, √((n − 1)s² / χ²_{1−confidence, n−1}) (model-based, like
    :func:`laplace_scale_upper`)."""
    a = np.asarray(noise, dtype=np.float64).ravel()
    if a.size < 2:
        raise PrivacyError("need at least two noise draws to bound their scale")
    n = a.size
    return math.sqrt((n - 1) * a.var(ddof=1) / chi2.ppf(1 - confidence, n - 1))


def gaussian_rho_spent(noise: np.ndarray, distance: np.ndarray, confidence: float) -> float:
    """The zCDP ρ that Gaussian noise really added spends for a pair, bounded below: Σ_c Δ_c² / (2σ_c²)
    over the differing cells, each cell's σ_c bounded above from its own draws (mean zero: chi-square
    with n degrees of freedom), at ``confidence`` jointly (Bonferroni over cells). A correct program
    stays at or below the ρ it declares but for the 1 − confidence chance; noise too small shows."""
    noise = np.asarray(noise, dtype=np.float64)
    n, k = noise.shape
    level = 1 - (1 - confidence) / max(k, 1)
    sigma = np.array([gaussian_sigma_upper_stats(n, float(s), level) for s in (noise * noise).sum(axis=0)])
    with np.errstate(divide="ignore"):
        return float(np.sum(np.where(sigma > 0, np.asarray(distance, dtype=np.float64) ** 2 / (2 * sigma**2), np.inf)))


def opendp_rho(epsilon: float, delta: float) -> float:
    """The zCDP ρ whose Gaussian mechanism OpenDP's conversion (zCDP to (ε, δ)-DP, with δ fixed) puts at
    exactly (ε, δ): the ρ SmartNoise Synth derives its noise from (its cdp_rho), found the same way
    through OpenDP's own maps."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float)
    scale = dp.binary_search_param(
        lambda s: dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(dp.m.make_gaussian(*space, s)), delta),
        d_in=1.0, d_out=(float(epsilon), float(delta)))
    return float(dp.m.make_gaussian(*space, scale).map(1.0))


#: the fewest draws a bin of the shape test expects. The audit reads these p-values at Bonferroni levels
#: of 1e-5 to 1e-4, where the chi-square law holds only if no bin is nearly empty: with the far bin
#: expecting 5 draws (and the bins before it under 10) a Poisson excess in one bin (15 draws where 5 are
#: expected) alone passes the statistic's 1e-5 quantile, and correct discrete Laplace noise failed 2 to
#: 3.6 times too often at p < 3e-5 and 1e-5; with every bin expecting 50 or more the rate is below the
#: nominal one at every level (10^6 tests of 10^6 draws, scale fitted: bench/shape_test_level.py). The
#: bins still reach about ln(n / 50) scales: Laplace noise clipped at 8 scales fails at 10^6 draws.
SHAPE_TAIL_EXPECTED = 50.0


def shape_bins(n: int, tail, kmax: int) -> tuple[np.ndarray, np.ndarray]:
    """The shape test's bins for ``n`` draws of |noise| whose largest is below ``kmax``, given the fitted
    law's tail function P(|X| ≥ k): left edges spaced in log tail probability from 0 to the far tail, the
    last bin open, every bin expecting at least :data:`SHAPE_TAIL_EXPECTED` draws (an edge that would
    leave less before it or beyond it is dropped), and each bin's probability."""
    qmin = SHAPE_TAIL_EXPECTED / n
    bins = int(min(60, max(8, math.sqrt(n) / 10)))
    qs = qmin ** (np.arange(1, bins + 1) / bins)
    top = max(int(kmax), 64)
    while tail(np.array([top]))[0] >= qmin and top < 1 << 40:  # out to where the fitted tail ends
        top *= 2
    ks = np.arange(top + 1)
    tails = tail(ks)
    kept = [0]
    for e in np.unique(np.concatenate([[1], np.searchsorted(-tails, -qs, side="left")])):
        if e < len(ks) and tails[e] >= qmin and tails[kept[-1]] - tails[e] >= qmin:
            kept.append(int(e))
    edges = np.array(kept)
    return edges, tails[edges] - np.append(tails[edges[1:]], 0.0)


def binned_chi_square_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """p-value of the Pearson chi-square of binned draws against the bins' probabilities, the law's one
    parameter fitted on the ungrouped draws: the statistic then lies between chi-square(bins − 2) and
    chi-square(bins − 1) (Chernoff and Lehmann, 1954); bins − 1 keeps the test's level (bins − 2, the
    grouped-data rule, rejected a correct mechanism too often)."""
    expected = probs * counts.sum()
    keep = expected > 0
    stat = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    return float(chi2.sf(stat, max(int(keep.sum()) - 1, 1)))


def _chi_square_tail_bins(a: np.ndarray, tail) -> float:
    """Chi-square of |noise| draws ``a`` against a fitted law given by its tail function P(|X| ≥ k),
    over :func:`shape_bins`: a clipped tail or a flat shape shows in them."""
    edges, probs = shape_bins(a.size, tail, int(a.max()) + 1)
    return binned_chi_square_pvalue(np.histogram(a, bins=np.append(edges, np.inf))[0], probs)


def laplace_ratio(mean_abs: float) -> float:
    """The discrete Laplace's r = e^{−1/t} whose mean |x|, 2r/(1 − r²), is ``mean_abs`` (the maximum
    likelihood fit from |x|)."""
    return (math.sqrt(1 + mean_abs * mean_abs) - 1) / mean_abs if mean_abs > 0 else 0.0


def laplace_abs_tail(r: float):
    """P(|X| ≥ k) of the discrete Laplace with ratio r, as a function of an integer array k."""
    return lambda k: np.where(k <= 0, 1.0, 2 * r ** k.astype(np.float64) / (1 + r))


def laplace_shape_pvalue(noise: np.ndarray) -> float:
    """p-value of the draws being discrete Laplace (any scale: fitted by maximum likelihood, mean |x|
    = 2r/(1 − r²), r = e^{−1/t}), from a chi-square over the whole range of |x| out to the far tail.
    Rejects bounded (uniform) noise and Laplace noise clipped at ±8 scales at the audit's sample
    sizes (about 10⁶ draws), where the scale check alone, which trusts the shape, does not."""
    a = np.abs(np.asarray(noise, dtype=np.int64)).ravel()
    m = a.mean() if a.size else 0.0
    if a.size < 100 or m == 0:
        return 1.0
    return _chi_square_tail_bins(a, laplace_abs_tail(laplace_ratio(m)))


def clipped_upper_excess(outputs: np.ndarray, count: int) -> np.ndarray:
    """The draws of discrete Laplace noise X that a release clipped at zero, max(c + X, 0), shows
    exactly, as excesses over a threshold: X − x0 for the draws with X ≥ x0, x0 = 0 when the true
    count c is positive (those outputs are never clipped) and 1 when it is 0. Their law is
    geometric whatever x0 (the discrete Laplace is memoryless on its upper side):
    P(X − x0 ≥ k | X ≥ x0) = r^k, r = e^{−1/t}."""
    x = np.asarray(outputs, dtype=np.int64).ravel() - int(count)
    x0 = 0 if count > 0 else 1
    return x[x >= x0] - x0


def geometric_scale_upper(excess: np.ndarray, confidence: float = 0.95) -> float:
    """An upper confidence bound on the discrete Laplace scale t from the upper-side excesses of
    :func:`clipped_upper_excess`: their mean is r/(1 − r), increasing in t; its upper bound (normal
    approximation) is solved for r (model-based, like :func:`laplace_scale_upper`)."""
    g = np.asarray(excess, dtype=np.float64).ravel()
    if g.size < 2:
        raise PrivacyError("need at least two unclipped noise draws to bound their scale")
    m = g.mean() + _normal_quantile(confidence) * g.std(ddof=1) / math.sqrt(g.size)
    if m <= 0:
        return 0.0
    r = m / (1.0 + m)
    return -1.0 / math.log(r)


def geometric_scale_upper_exact(excess: np.ndarray, confidence: float = 0.95) -> float:
    """An exact upper confidence bound on the discrete Laplace scale t from the upper-side excesses of
    :func:`clipped_upper_excess`: their sum over n draws is negative binomial, NB(n, 1 − r) with r = e^{−1/t},
    whose P_r(S ≤ s) falls as r grows; the bound is the r where it reaches 1 − confidence. Unlike the normal
    bound (:func:`geometric_scale_upper`) it holds where almost every excess is 0 (a large ε: at ε = 10 a
    histogram's noise is off zero once in 150 draws), and a group with none off zero gets a finite bound.

    >>> t = geometric_scale_upper_exact(np.zeros(1000, dtype=np.int64), 0.99)
    >>> 0 < t < 0.25  # r ≤ 1 − 0.01^(1/1000): t = −1/ln r
    True
    """
    g = np.asarray(excess, dtype=np.int64).ravel()
    n, total = int(g.size), int(g.sum())
    if n < 1:
        return math.inf
    alpha = 1 - confidence

    def p_le(r: float) -> float:
        return float(nbinom.cdf(total, n, 1 - r))

    lo, hi = 1e-300, 1 - 1e-15
    if p_le(hi) >= alpha:
        return math.inf
    if p_le(lo) < alpha:
        return -1.0 / math.log(lo)
    r = brentq(lambda x: p_le(x) - alpha, lo, hi, xtol=1e-300, rtol=1e-13)
    while r < hi and p_le(r) >= alpha:  # stepped up to the conservative side of the root
        r = min(r * (1 + 1e-12) + 1e-300, hi)
    return -1.0 / math.log(r)


def geometric_shape_pvalue(excess: np.ndarray) -> float:
    """p-value of upper-side excesses being geometric (r fitted: mean r/(1 − r)), i.e. of the noise
    being discrete Laplace on the side a clip at zero never touches; a chi-square over the whole
    range out to the far tail, as :func:`laplace_shape_pvalue`."""
    g = np.asarray(excess, dtype=np.int64).ravel()
    m = g.mean() if g.size else 0.0
    if g.size < 100 or m == 0:
        return 1.0
    r = m / (1.0 + m)
    return _chi_square_tail_bins(g, lambda k: np.where(k <= 0, 1.0, r ** k.astype(np.float64)))


def gaussian_shape_pvalue(noise: np.ndarray) -> float:
    """p-value of the draws being discrete Gaussian (σ fitted from their variance), as
    :func:`laplace_shape_pvalue`."""
    x = np.asarray(noise, dtype=np.int64).ravel()
    a = np.abs(x)
    if a.size < 100 or a.max(initial=0) == 0:
        return 1.0
    var = float(x.var())
    kmax = int(max(a.max(), 12 * math.sqrt(var))) + 2
    k = np.arange(kmax + 1, dtype=np.float64)

    def model_var(s2):  # the discrete Gaussian's variance at parameter σ² (below σ² for small σ)
        w = np.exp(-k**2 / (2 * s2))
        return float((2 * (k**2 * w)[1:].sum()) / (w[0] + 2 * w[1:].sum()))

    lo, hi = 1e-6, max(var, 1e-6) * 4 + 4
    for _ in range(100):  # the parameter whose variance is the draws' (the moment fit)
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if model_var(mid) < var else (lo, mid)
    w = np.exp(-k**2 / (2 * ((lo + hi) / 2)))
    p_abs = np.where(k == 0, w, 2 * w)
    p_abs /= p_abs.sum()
    tails_arr = np.cumsum(p_abs[::-1])[::-1]

    def tail(ks):
        ks = np.asarray(ks)
        return np.where(ks < len(tails_arr), tails_arr[np.minimum(ks, len(tails_arr) - 1)], 0.0)

    return _chi_square_tail_bins(a, tail)


def _normal_quantile(p: float) -> float:
    return float(norm.ppf(p))


# ---- checks over whole releases: the noise's scale by group, its shape and tail, its independence ----------------


@dataclass
class NoiseGroups:
    """Sums of |x|, x² and counts of noise draws per named group (a level and query's node, a table, a band of
    true counts), accumulated release by release, and a capped sample of the draws for the shape test."""

    sums: dict = field(default_factory=dict)
    sample: list = field(default_factory=list)
    sampled: int = 0
    tail: dict = field(default_factory=dict)  # per family key: all |x| of the pooled draws' far tail, by threshold

    def add(self, group, noise: np.ndarray) -> None:
        x = np.asarray(noise, dtype=np.float64).ravel()
        if not x.size:
            return
        n, a, q = self.sums.get(group, (0, 0.0, 0.0))
        self.sums[group] = (n + x.size, a + float(np.abs(x).sum()), q + float((x * x).sum()))

    def keep(self, noise: np.ndarray, limit: int, rng: np.random.Generator) -> None:
        x = np.asarray(noise, dtype=np.int64).ravel()
        room = limit - self.sampled
        if room <= 0 or not x.size:
            return
        take = x if x.size <= room else rng.choice(x, room, replace=False)
        self.sample.append(take)
        self.sampled += take.size


#: Up to this many draws the scale bound is exact (below); beyond, the normal approximation is accurate.
EXACT_SCALE_DRAWS = 20_000


def laplace_scale_upper_exact(n: int, total: int, confidence: float) -> float:
    """An exact upper confidence bound on the discrete Laplace scale t from n draws whose |x| add up to
    ``total``: S = Σ|x| is K + NB(K, 1 − r) with K ~ Binomial(n, 2r/(1 + r)) the draws off zero (each |x|
    ≥ 1 is 1 plus a geometric count), r = e^{−1/t}; P_r(S ≤ total) falls as r grows, and the bound is the r
    where it reaches 1 − confidence. A normal bound on a small group's skewed |x| is too optimistic at the
    audit's levels (it failed correct audits); this one is not."""
    alpha = 1 - confidence
    top = min(n, int(total))

    def p_le(r: float) -> float:
        q = 2 * r / (1 + r)
        m, sd = n * q, math.sqrt(n * q * (1 - q))
        # the binomial's terms beyond 40 standard deviations weigh nothing at any confidence; their mass
        # is added whole (each conditional probability taken as 1), so the sum stays an upper bound
        lo_k, hi_k = max(0, int(m - 40 * sd) - 10), min(top, int(m + 40 * sd) + 10)
        k = np.arange(lo_k, hi_k + 1)
        w = binom.pmf(k, n, q)
        c = np.where(k == 0, 1.0, nbinom.cdf(int(total) - k, np.maximum(k, 1), 1 - r))
        rest = (binom.cdf(lo_k - 1, n, q) if lo_k > 0 else 0.0) + (binom.sf(hi_k, n, q) if hi_k < top else 0.0)
        return float((w * c).sum() + rest)

    lo, hi = 1e-12, 1 - 1e-12
    if p_le(hi) >= alpha:
        return math.inf
    if p_le(lo) < alpha:
        return -1.0 / math.log(lo)
    # the root by Brent's method (a dozen evaluations where bisection to the same precision takes 60), then
    # stepped up until P_r(S ≤ total) is below 1 − confidence: the bound stays on the conservative side
    r, step = brentq(lambda x: p_le(x) - alpha, lo, hi, xtol=1e-14, rtol=1e-13), 1e-13
    while r < hi and p_le(r) >= alpha:
        r, step = min(r + step, hi), step * 4
    return -1.0 / math.log(r)


def laplace_scale_upper_stats(n: int, sum_abs: float, sum_sq: float, confidence: float) -> float:
    """:func:`laplace_scale_upper` from a group's sums (n draws, Σ|x|, Σx²): exact for up to
    :data:`EXACT_SCALE_DRAWS` draws (:func:`laplace_scale_upper_exact`), the normal bound beyond."""
    if n < 2:
        return math.inf
    if n <= EXACT_SCALE_DRAWS:
        return laplace_scale_upper_exact(int(n), int(round(sum_abs)), confidence)
    m = sum_abs / n
    var = max(sum_sq / n - m * m, 0.0) * n / (n - 1)
    m_hi = m + _normal_quantile(confidence) * math.sqrt(var / n)
    if m_hi <= 0:
        return 0.0
    r = (math.sqrt(1.0 + m_hi * m_hi) - 1.0) / m_hi
    return -1.0 / math.log(r) if 0 < r < 1 else math.inf


def gaussian_sigma_upper_stats(n: int, sum_sq: float, confidence: float) -> float:
    """An upper confidence bound on σ from a group's n draws and Σx² (mean known to be 0: chi-square with n
    degrees of freedom)."""
    if n < 2:
        return math.inf
    if sum_sq == 0:  # every draw 0: the chi-square bound would say no noise; P(all n at 0) ≥ 1 − confidence instead
        return _discrete_gaussian_all_zero_upper(n, confidence)
    return math.sqrt(sum_sq / chi2.ppf(1 - confidence, n))


def _discrete_gaussian_all_zero_upper(n: int, confidence: float) -> float:
    """The largest σ of a discrete Gaussian under which n draws all at 0 still have chance 1 − confidence:
    p₀(σ)ⁿ = 1 − confidence, p₀(σ) = 1 / Σ_k e^{−k²/2σ²} (falls as σ grows).

    >>> s = _discrete_gaussian_all_zero_upper(10, 0.95)
    >>> p0 = 1 / sum(math.exp(-k * k / (2 * s * s)) for k in range(-50, 51))
    >>> round(p0 ** 10, 6)
    0.05
    """
    target = (1 - confidence) ** (1 / n)

    def p0(sigma: float) -> float:
        k = np.arange(-int(40 * sigma) - 2, int(40 * sigma) + 3)
        return float(1 / np.exp(-k * k / (2 * sigma * sigma)).sum())

    return float(brentq(lambda sg: p0(sg) - target, 1e-3, 1e4))


def tail_threshold(n: int, mean_abs: float, mean_sq: float, gaussian: bool, expected: float = 30.0
                   ) -> tuple[int, float] | None:
    """The far-tail point k where the law fitted to n draws (discrete Laplace from their mean |x|, or
    Gaussian from their mean x², as the shape tests fit them) expects ``expected`` draws with |x| ≥ k,
    and that law's P(|X| ≥ k); None when the draws are too few or all zero."""
    if n < 1000:
        return None
    if gaussian:
        s = math.sqrt(mean_sq)
        if s == 0:
            return None
        k = math.ceil(s * norm.isf(expected / (2 * n)))
        return k, 2 * norm.sf((k - 0.5) / s)
    if mean_abs == 0:
        return None
    r = (math.sqrt(1 + mean_abs * mean_abs) - 1) / mean_abs
    k = max(1, math.ceil(math.log(expected * (1 + r) / (2 * n)) / math.log(r)))
    return k, 2 * r**k / (1 + r)


def tail_pvalue(noise: np.ndarray, gaussian: bool, expected: float = 30.0) -> float:
    """p-value of too few draws in the far tail: the Poisson chance of seeing at most the observed number
    of draws beyond :func:`tail_threshold`. Noise cut off short of its tail (a truncated Gaussian, a
    clipped Laplace) has none there, however many draws the chi-square's bins pool."""
    x = np.asarray(noise, dtype=np.float64).ravel()
    t = tail_threshold(x.size, float(np.abs(x).mean()) if x.size else 0.0,
                       float((x * x).mean()) if x.size else 0.0, gaussian, expected)
    if t is None:
        return 1.0
    k, p_tail = t
    return float(poisson.cdf(int((np.abs(x) >= k).sum()), x.size * p_tail))


def _ranks(x: np.ndarray, axis: int) -> np.ndarray:
    """Ranks along ``axis``, centred and scaled to unit norm (Spearman's correlation is then a dot product)."""
    r = np.argsort(np.argsort(x + 1e-9 * np.random.default_rng(0).random(x.shape), axis=axis), axis=axis).astype(np.float64)
    r -= r.mean(axis=axis, keepdims=True)
    return r / np.sqrt((r * r).sum(axis=axis, keepdims=True))


def _duplicate_pvalue(x: np.ndarray) -> tuple[float, str]:
    """Columns (and releases) whose noise is identical in every draw: independent discrete noise coincides
    in one draw with probability at most its largest point mass p₀ = (1 − r)/(1 + r) (of the discrete
    Laplace with the column's mean |x|; a Gaussian of that mean |x| is less peaked), so in all R draws with
    at most p₀^R; Bonferroni over every pair. Returns that p-value for the likeliest duplicate found."""
    R, C = x.shape
    best, where = 1.0, "no identical columns or releases"
    for axis, n_items, n_draws, what in ((1, C, R, "columns"), (0, R, C, "releases")):
        if n_items < 2 or n_draws < 2:
            continue
        items = x.T if axis == 1 else x
        seen: dict = {}
        for i, row in enumerate(np.ascontiguousarray(items)):
            seen.setdefault(row.tobytes(), []).append(i)
        for group in seen.values():
            if len(group) < 2:
                continue
            m = float(np.abs(items[group[0]]).mean())
            r = laplace_ratio(m)
            p0 = (1 - r) / (1 + r) if m > 0 else 1.0
            p = min(1.0, p0**n_draws * n_items * (n_items - 1) / 2)
            if p < best:
                best, where = p, f"{what} {group[0]} and {group[1]} identical in all {n_draws} draws"
    return best, where


def independence_pvalue(noise: np.ndarray, chunk: int = 2048) -> tuple[float, str]:
    """Whether noise columns are independent: ``noise`` (releases × columns); Spearman's rank correlation of
    every pair of columns over the releases, z = ρ·√(R − 1) ≈ N(0, 1) under independence (ranks are bounded,
    so its tails are no heavier than the normal's), and of every pair of consecutive releases over the
    columns likewise. Returns the Bonferroni p-value of the largest |z| and where it is. Broadcast noise (one
    draw reused for several cells, nodes or releases) has ρ = 1."""
    x = np.asarray(noise, dtype=np.float64)
    R, C = x.shape
    best, where, tests = 0.0, "nothing tested", 0
    if R >= 10 and C >= 2:
        s = _ranks(x, 0)
        cols = np.arange(C)
        for a0 in range(0, C, chunk):
            rows = cols[a0:a0 + chunk]
            r = s[:, rows].T @ s  # (chunk × C) rank correlations
            r[cols[None, :] <= rows[:, None]] = 0.0  # each pair once
            i, j = np.unravel_index(np.argmax(np.abs(r)), r.shape)
            z = abs(float(r[i, j])) * math.sqrt(R - 1)
            if z > best:
                best, where = z, f"columns {int(rows[i])} and {int(j)}"
        tests += C * (C - 1) // 2
    if C >= 10 and R >= 2:
        s = _ranks(x, 1)
        r = (s[:-1] * s[1:]).sum(1)
        z = np.abs(r) * math.sqrt(C - 1)
        k = int(np.argmax(z))
        if z[k] > best:
            best, where = float(z[k]), f"releases {k} and {k + 1}"
        tests += R - 1
    p_dup, dup_where = _duplicate_pvalue(x)
    if p_dup < 2 * norm.sf(best) * max(tests, 1):
        return float(min(1.0, 2 * p_dup)), dup_where
    if not tests:
        return 1.0, "not enough draws"
    return float(min(1.0, 2 * norm.sf(best) * tests)), where
