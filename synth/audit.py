"""Empirical ε auditor: a Clopper–Pearson lower bound on ε from many runs on neighbouring datasets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.stats import beta

from synth.mechanism import PrivacyError, Relation, parse_relation


@dataclass(frozen=True)
class AuditResult:
    mechanism: str
    declared_epsilon: float
    epsilon_lower_bound: float
    runs: int
    confidence: float
    event: str

    def as_dict(self) -> dict:
        return {"mechanism": self.mechanism, "declared_epsilon": self.declared_epsilon,
                "epsilon_lower_bound": self.epsilon_lower_bound, "runs": self.runs,
                "confidence": self.confidence, "event": self.event}


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Two one-sided (1 - alpha) Clopper–Pearson bounds on a binomial proportion."""
    lo = 0.0 if successes == 0 else float(beta.ppf(alpha, successes, trials - successes + 1))
    hi = 1.0 if successes == trials else float(beta.ppf(1 - alpha, successes + 1, trials - successes))
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


def audit(release: Callable[[np.ndarray, int], np.ndarray], d: np.ndarray, d2: np.ndarray, declared_epsilon: float,
          name: str, runs: int = 200_000, confidence: float = 0.95, offsets=(1, 2, 3, 4),
          reference: np.ndarray | None = None) -> AuditResult:
    """Lower-bound the ε of ``release`` from ``runs`` draws on each of two neighbouring inputs.

    ``release(counts, runs)`` returns a (runs × outputs) integer array, one release per row;
    outputs line up with ``counts`` (for count mechanisms: the noisy cells). The events
    are rectangles over the cells where d and d2 differ: every such output at least
    ``t`` beyond its count in the direction d2 moved it. The event (and direction) with
    the best Clopper–Pearson bound on one half of the runs is certified on the other, where
    Clopper–Pearson bounds give ε ≥ log(P_lo(E|A) / P_hi(E|B)) with the stated
    confidence. A correct ε-DP mechanism gives a bound ≤ ε (but for the 1 - confidence
    chance); a mis-stated one is caught when its true ε exceeds the declared one.
    Thresholds are offsets from ``reference`` (default: ``d``, right for noisy counts; a
    mechanism that outputs draws passes the expected draw counts).
    """
    diff = np.asarray(d2, dtype=np.int64) - np.asarray(d, dtype=np.int64)
    idx = np.flatnonzero(diff)
    if idx.size == 0:
        raise PrivacyError("the two datasets are identical; nothing to audit")
    ref = np.asarray(d if reference is None else reference, dtype=np.int64)
    half = runs // 2
    y1 = release(np.asarray(d), runs)
    y2 = release(np.asarray(d2), runs)

    def events(y, counts, t, sign):
        # sign=+1: outputs moved towards d2; sign=-1: towards d
        dirn = np.sign(diff[idx]) * sign
        z = (y[:, idx] - counts[idx][None, :]) * dirn[None, :]
        return np.all(z >= t, axis=1)

    best = None
    for sign in (1, -1):
        for t in offsets:
            # event measured relative to the midpoint: use d for both (thresholds fixed before seeing data)
            e_a = events(y2[:half], ref, t, sign) if sign == 1 else events(y1[:half], ref, t, sign)
            e_b = events(y1[:half], ref, t, sign) if sign == 1 else events(y2[:half], ref, t, sign)
            # score an event by the bound it would certify, so rare events whose empirical
            # ratio is mostly noise do not win the selection
            lo, _ = clopper_pearson(int(e_a.sum()), half, (1 - confidence) / 2)
            _, hi = clopper_pearson(int(e_b.sum()), half, (1 - confidence) / 2)
            if lo > 0:
                score = math.log(lo / hi)
                if best is None or score > best[0]:
                    best = (score, sign, t)
    if best is None:
        return AuditResult(name, declared_epsilon, 0.0, runs, confidence, "none")
    _, sign, t = best
    hold1, hold2 = y1[half:], y2[half:]
    if sign == 1:
        a_hits, b_hits = events(hold2, ref, t, sign).sum(), events(hold1, ref, t, sign).sum()
    else:
        a_hits, b_hits = events(hold1, ref, t, sign).sum(), events(hold2, ref, t, sign).sum()
    n = runs - half
    alpha = (1 - confidence) / 2
    pa_lo, _ = clopper_pearson(int(a_hits), n, alpha)
    _, pb_hi = clopper_pearson(int(b_hits), n, alpha)
    eps = max(0.0, math.log(pa_lo / pb_hi)) if pa_lo > 0 else 0.0
    return AuditResult(name, declared_epsilon, eps, runs, confidence, f"offset {t}, direction {sign:+d}")
