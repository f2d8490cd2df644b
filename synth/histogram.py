"""Wasserman & Zhou's DP histograms: the perturbed histogram and the smoothed histogram, over sparse domains."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.synth.mechanism import (Mechanism, PrivacyError, Relation, check_counts, check_epsilon, histogram_sensitivity,
                             parse_relation)
from censusrecon.synth.keyed import noisy, releases_of
from censusrecon.synth.noise import noise_scale

#: Largest domain noised cell by cell; beyond it the simulation backend noises empty cells sparsely.
DENSE_LIMIT = 2_000_000
#: Most empty cells with positive noise the sparse path will list.
SPARSE_LIMIT = 20_000_000


@dataclass(frozen=True)
class SparseHistogram:
    """Non-negative counts on the cells listed in ``keys`` (every other cell of the domain is 0)."""

    keys: np.ndarray
    counts: np.ndarray
    domain_size: int

    def probabilities(self) -> np.ndarray:
        total = self.counts.sum()
        if total <= 0:
            return np.full(len(self.counts), 1.0 / max(len(self.counts), 1))
        return self.counts / total

    def sample(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        """``rows`` keys drawn i.i.d. from the normalised histogram (post-processing: free).

        An all-zero histogram carries no information; rows are then uniform over the domain."""
        if self.counts.sum() <= 0:
            return rng.integers(0, self.domain_size, size=rows, dtype=np.int64)
        return rng.choice(self.keys, size=rows, p=self.probabilities())


def _cells(data: Dataset) -> tuple[np.ndarray, np.ndarray]:
    keys, counts = np.unique(data.keys(), return_counts=True)
    return keys.astype(np.int64), check_counts(counts)


def perturbed_histogram(data: Dataset, epsilon: float, backend, relation: Relation | str = Relation.REPLACE_ONE,
                        rng: np.random.Generator | None = None, runs=None,
                        dense_limit: int = DENSE_LIMIT, cells: np.ndarray | None = None
                        ) -> tuple[SparseHistogram | list | np.ndarray, Mechanism]:
    """Wasserman & Zhou (2010, §4.1) perturbed histogram of ``data`` over its whole domain.

    Privacy unit: one person (row). Relation: ``replace_one`` (the paper's: same n,
    Hamming distance 1) or ``add_remove``. Sensitivity of the count vector: 2 under
    replace-one (a record moves between two cells), 1 under add/remove; the noise is
    discrete Laplace with scale Δ/ε on every cell's int64 count (the paper's D_j = C_j + ν_j
    with ν_j of scale 2/α), then D̃_j = max(D_j, 0): an ε-DP histogram; normalising it and
    sampling rows from it is post-processing.

    Cells that are empty in the data are not materialised when the domain is large: with
    the simulation backend the number of empty cells whose noise is positive is drawn
    from its binomial law, their positions uniformly, and their values from the noise's
    law given it is ≥ 1 (for the discrete Laplace, 1 + a geometric count) — the same
    distribution as noising every cell. The OpenDP backend noises every cell (up to
    ``dense_limit`` cells).

    The number of cells m comes from the declared domain, never from the data. ``runs``
    releases that many times (the auditor's batches, through this same code): the dense path
    then returns the clipped counts, one row per release; the sparse path a list of histograms.
    ``cells`` (with ``runs``, dense path only): those cells' clipped counts alone, each drawn as in the whole
    release (a keyed backend draws a cell the same whichever others are drawn).
    """
    relation = parse_relation(relation)
    m = data.domain.total_size
    delta_l1 = histogram_sensitivity(relation, m)
    scale, backend_epsilon = noise_scale(delta_l1, epsilon, backend)
    details = {"cells": m, "reference": "Wasserman & Zhou 2010, sec. 4.1"}
    if backend_epsilon is not None:
        details["backend_epsilon"] = backend_epsilon
    mech = Mechanism("perturbed_histogram", relation, delta_l1, epsilon, scale, details=details)
    keys, counts = _cells(data)
    if cells is not None and (runs is None or m > dense_limit):
        raise PrivacyError("cells of a histogram are drawn for a batch of releases over a domain noised densely")
    if m <= dense_limit:
        full = np.zeros(m, dtype=np.int64)
        full[keys] = counts
        if cells is not None:
            cells = np.asarray(cells, dtype=np.int64)
            return np.maximum(noisy(backend, full[cells], scale, releases=releases_of(runs), cells=cells), 0), mech
        batch = noisy(backend, full, scale, releases=releases_of(runs))  # a single release: a batch of one
        if runs is not None:
            return np.maximum(batch, 0), mech
        pos = np.flatnonzero(batch[0] > 0)
        return SparseHistogram(pos.astype(np.int64), batch[0][pos], m), mech
    if backend.for_publication:
        raise PrivacyError(f"domain of {m} cells is too large to noise densely with {backend.name}; "
                           f"limit {dense_limit} (use fewer attributes or the smoothed histogram)")
    if rng is None:
        raise PrivacyError("the large-domain path draws its empty cells from rng: give one")
    occupied = noisy(backend, counts, scale, releases=releases_of(runs))  # every release's at once: one path
    if runs is not None:
        return [_sparse_release(keys, row, m, scale, epsilon, rng) for row in occupied], mech
    return _sparse_release(keys, occupied[0], m, scale, epsilon, rng), mech


def _sparse_release(keys, noisy_occupied, m: int, scale: float, epsilon: float, rng) -> SparseHistogram:
    """One perturbed histogram over a domain too large to list: the occupied cells' noisy counts
    ``noisy_occupied``; of the empty cells, those whose noise would be positive are drawn directly."""
    r = math.exp(-1.0 / scale)
    n_empty = m - len(keys)
    n_pos = int(rng.binomial(n_empty, r / (1.0 + r)))
    if n_pos > SPARSE_LIMIT:
        raise PrivacyError(f"{n_pos} empty cells would receive positive noise; the domain is too large for ε={epsilon}")
    extra = np.zeros(0, dtype=np.int64)
    while extra.size < n_pos:  # distinct empty cells, uniformly
        draw = rng.integers(0, m, size=2 * (n_pos - extra.size) + 16, dtype=np.int64)
        draw = draw[~np.isin(draw, keys)]
        extra = np.unique(np.concatenate([extra, draw]))
    extra = rng.permutation(extra)[:n_pos]
    extra_vals = rng.geometric(1.0 - r, size=n_pos).astype(np.int64)  # P(j) = (1-r) r^(j-1), j >= 1
    all_keys = np.concatenate([keys, extra])
    all_vals = np.concatenate([noisy_occupied, extra_vals])
    keep = all_vals > 0
    order = np.argsort(all_keys[keep])
    return SparseHistogram(all_keys[keep][order], all_vals[keep][order], m)


def smoothed_delta(epsilon: float, n: int, cells: int, rows: int) -> float:
    """The smallest mixing weight δ for which releasing ``rows`` draws is ε-DP.

    Wasserman & Zhou (2010, §4.2): q̂ = (1-δ)p̂ + δ/m is ε-DP for k draws when
    k·log(1 + (1-δ)m/(nδ)) ≤ ε. Writing a = e^{ε/k} - 1, equality gives δ = m / (m + a·n).

    >>> round(smoothed_delta(1.0, n=100, cells=10, rows=1), 6)  # 10 / (10 + (e - 1)·100)
    0.054997
    """
    if not epsilon > 0 or n < 1 or cells < 1 or rows < 1:
        raise PrivacyError(f"need epsilon > 0, n, cells and rows >= 1; got {epsilon}, {n}, {cells}, {rows}")
    check_epsilon(epsilon)
    a = math.expm1(epsilon / rows)
    delta = min(1.0, cells / (cells + a * n))
    # rounded up until the condition holds in floating point too (a larger δ is more private)
    while delta < 1.0 and smoothed_epsilon(delta, n, cells, rows) > epsilon:
        delta = float(np.nextafter(delta, 2.0))
    return delta


def smoothed_epsilon(delta: float, n: int, cells: int, rows: int) -> float:
    """ε of the smoothed histogram: k·log(1 + (1-δ)m/(nδ)) (Wasserman & Zhou 2010, §4.2)."""
    if not 0 < delta <= 1:
        raise PrivacyError(f"delta must lie in (0, 1], got {delta}")
    return rows * math.log1p((1.0 - delta) * cells / (n * delta))


def smoothed_histogram(data: Dataset, epsilon: float, rows: int, rng: np.random.Generator,
                       runs: int | None = None) -> tuple[np.ndarray, Mechanism]:
    """Release ``rows`` keys drawn i.i.d. from (1-δ)p̂ + δ/m with δ from :func:`smoothed_delta`.

    Privacy unit: one person. Relation: replace-one only (n is public; the condition of
    §4.2 bounds the ratio of q̂ under databases of the same size). No additive noise: the
    randomness is the sampling, here numpy's (simulation; not for publication). The
    uniform part is drawn as keys, so the domain is never materialised.
    """
    n = len(data)
    m = data.domain.total_size
    delta = smoothed_delta(epsilon, n, m, rows)
    mech = Mechanism("smoothed_histogram", Relation.REPLACE_ONE, 2, epsilon, None,
                     details={"cells": m, "delta": delta, "rows": rows, "n": n,
                              "reference": "Wasserman & Zhou 2010, sec. 4.2"})
    data_keys = data.keys()
    shape = (rows,) if runs is None else (int(runs), rows)  # runs: independent releases, one per row
    from_data = rng.random(shape) >= delta
    out = np.where(from_data, data_keys[rng.integers(0, n, size=shape)],
                   rng.integers(0, m, size=shape, dtype=np.int64))
    return out.astype(np.int64), mech


def smoothed_worst_case_epsilon(counts: np.ndarray, delta: float, rows: int) -> float:
    """Exact worst-case privacy loss of the smoothed histogram on a small dense domain: the
    max over all single-record replacements (a→b) and outcomes of log P(out|D)/P(out|D').

    The k draws are independent given the data, so the loss is k times the largest
    per-draw log ratio max_j log(q_j / q'_j).
    """
    counts = check_counts(counts)
    n, m = int(counts.sum()), counts.size
    q = (1 - delta) * counts / n + delta / m
    worst = 0.0
    for a in np.flatnonzero(counts > 0):
        for b in range(m):
            if a == b:
                continue
            c2 = counts.copy()
            c2[a] -= 1
            c2[b] += 1
            q2 = (1 - delta) * c2 / n + delta / m
            worst = max(worst, float(np.max(np.abs(np.log(q) - np.log(q2)))))
    return rows * worst
