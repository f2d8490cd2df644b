"""The membership game's figures: true-positive rate at a false-positive rate with exact intervals, AUC, the
ε an attack's success implies, and DP's own cap on it.

A membership attack scores each target; members ("in") should score high. A test calls the high scores
members. Its false-positive rate (FPR) is the share of non-members it calls members. Its true-positive rate
(TPR) is the share of members it calls members. ``tpr_at_fpr`` sets the test on half of the non-members and
counts on the rest, so its counts give exact (Clopper–Pearson) intervals.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from censusrecon.microdata.errors import CensusReconError


class GameError(CensusReconError):
    """A membership game that cannot be scored as asked (no targets, an FPR outside (0, 1))."""


def check_fpr(fpr: float) -> float:
    """``fpr`` as a float in (0, 1), or a one-line error saying so."""
    fpr = float(fpr)
    if not 0 < fpr < 1:
        raise GameError(f"a false-positive rate is a share in (0, 1), got {fpr:g}: give e.g. 0.01 for 1%")
    return fpr


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval of a binomial share ``k`` of ``n``.

    >>> [round(x, 4) for x in clopper_pearson(0, 10)], [round(x, 4) for x in clopper_pearson(5, 10)]
    ([0.0, 0.3085], [0.1871, 0.8129])
    """
    if n <= 0:
        return 0.0, 1.0
    a = 1 - confidence
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


@dataclass(frozen=True)
class Operating:
    """One operating point of a test "score ≥ threshold": its counts, rates and their exact intervals."""

    fpr_asked: float
    threshold: float
    true_pos: int
    members: int
    false_pos: int
    non_members: int
    tpr: float
    tpr_low: float
    tpr_high: float
    fpr: float
    fpr_low: float
    fpr_high: float

    @property
    def advantage(self) -> float:
        """TPR − FPR: what the test gains over a guess that calls the same share of everyone a member."""
        return self.tpr - self.fpr

    def as_dict(self) -> dict:
        return {**asdict(self), "advantage": self.advantage}


def releases_needed(fpr: float) -> int:
    """The non-members a game needs to read TPR at ``fpr``: its test is set on half of them, which must hold at
    least 1/FPR (one call allowed), and counted on the other half.

    >>> releases_needed(0.01), releases_needed(0.001)
    (200, 2000)
    """
    return 2 * int(math.ceil(1 / check_fpr(fpr) - 1e-9))


def tpr_at_fpr(scores_in: np.ndarray, scores_out: np.ndarray, fpr: float, confidence: float = 0.95,
               rng: np.random.Generator | None = None) -> Operating:
    """The test that calls the high scores members, at the FPR asked, measured without bias: its threshold is set on
    a random half of the non-members (calling the share ``fpr`` of them, ties at the threshold called at random, the
    randomised test of Neyman and Pearson that an attacker can run), and its rates are counted on the members and on
    the other half. The counts are then binomial, so their Clopper–Pearson intervals are exact.

    >>> op = tpr_at_fpr(np.array([5, 4, 3]), np.array([0, 1, 2, 0, 1, 2]), 0.5)
    >>> op.tpr, op.members, op.non_members  # three members called; three non-members held out to count the FPR
    (1.0, 3, 3)
    """
    fpr = check_fpr(fpr)
    a, b = np.asarray(scores_in, dtype=np.float64).ravel(), np.asarray(scores_out, dtype=np.float64).ravel()
    if not a.size or b.size < 2:
        raise GameError(f"a membership game needs members and at least two non-members, got {a.size} and {b.size}")
    if np.isnan(a).any() or np.isnan(b).any():
        raise GameError("a membership score is NaN: the attack failed on some target")
    # scores equal but for rounding (a likelihood ratio summed in another order) are ties: compared to 9 digits
    a, b = _rounded(a), _rounded(b)
    rng = rng if rng is not None else np.random.default_rng(0)
    perm = rng.permutation(b.size)
    cal, held = b[perm[: b.size // 2]], b[perm[b.size // 2:]]
    k = int(math.floor(fpr * cal.size + 1e-9))  # the calibration non-members the test may call
    desc = np.sort(cal)[::-1]
    if k >= cal.size:
        tau, share = -math.inf, 1.0
    else:
        tau = float(desc[k])
        above, tied = int((cal > tau).sum()), int((cal == tau).sum())
        share = (k - above) / tied  # the share of scores equal to τ called: the randomised test's
    def called(x: np.ndarray) -> np.ndarray:
        return (x > tau) | ((x == tau) & (rng.random(x.size) < share))

    k_in, k_out = int(called(a).sum()), int(called(held).sum())
    tl, th = clopper_pearson(k_in, a.size, confidence)
    fl, fh = clopper_pearson(k_out, held.size, confidence)
    return Operating(fpr, tau, k_in, a.size, k_out, held.size, k_in / a.size, tl, th, k_out / held.size, fl, fh)


def _rounded(x: np.ndarray) -> np.ndarray:
    """``x`` to 9 significant digits of its largest magnitude, so that sums equal but for rounding compare equal.

    >>> (_rounded(np.array([0.1 + 0.2, 0.3])) == 0.3).tolist()
    [True, True]
    """
    scale = float(np.max(np.abs(x[np.isfinite(x)]), initial=0.0))
    if scale == 0:
        return x
    step = 10.0 ** (math.floor(math.log10(scale)) - 9)
    return np.round(x / step) * step


def auc(scores_in: np.ndarray, scores_out: np.ndarray) -> float:
    """The chance that a random member outscores a random non-member (ties count half).

    >>> auc(np.array([2, 3]), np.array([1, 2]))
    0.875
    """
    a, b = np.asarray(scores_in, dtype=np.float64).ravel(), np.asarray(scores_out, dtype=np.float64).ravel()
    if not a.size or not b.size:
        raise GameError(f"AUC needs members and non-members, got {a.size} and {b.size}")
    ranks = stats.rankdata(_rounded(np.concatenate([a, b])))
    return float((ranks[:a.size].sum() - a.size * (a.size + 1) / 2) / (a.size * b.size))


def dp_tpr_bound(epsilon: float, fpr: float, delta: float = 0.0) -> float:
    """The most TPR any test can reach at ``fpr`` against an (ε, δ)-DP release (Kairouz et al. 2015):
    min(1, e^ε·FPR + δ, 1 − e^−ε·(1 − δ − FPR)).

    >>> round(dp_tpr_bound(1.0, 0.01), 4), round(dp_tpr_bound(10.0, 0.01), 4), dp_tpr_bound(math.inf, 0.01)
    (0.0272, 1.0, 1.0)
    """
    if not math.isfinite(epsilon):
        return 1.0
    return float(min(1.0, math.exp(epsilon) * fpr + delta, 1 - math.exp(-epsilon) * (1 - delta - fpr)))


def epsilon_lower_bound(op: Operating, delta: float = 0.0) -> float:
    """The ε a test's success implies at its confidence: any (ε, δ)-DP release keeps TPR ≤ e^ε·FPR + δ and
    1 − FPR ≤ e^ε·(1 − TPR) + δ, so ε ≥ the larger of log((TPR_low − δ)/FPR_high) and
    log((1 − FPR_low − δ)/(1 − TPR_high)); 0 when neither is positive.

    >>> op = Operating(0.01, 1.0, 700, 1000, 10, 1000, 0.7, 0.67, 0.73, 0.01, 0.0048, 0.0183)
    >>> round(epsilon_lower_bound(op), 2)
    3.6
    """
    out = 0.0
    if op.fpr_high > 0 and op.tpr_low - delta > 0:
        out = max(out, math.log((op.tpr_low - delta) / op.fpr_high))
    if op.tpr_high < 1 and 1 - op.fpr_low - delta > 0:
        out = max(out, math.log((1 - op.fpr_low - delta) / (1 - op.tpr_high)))
    return out
