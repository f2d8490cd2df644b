"""The cell key method (as the Australian Bureau of Statistics built it and the ONS used it for the
2021 Census of England and Wales): every record carries a random record key; a cell's key is the
sum of its records' keys modulo the key range; its count is perturbed by the perturbation table's
entry for (count, cell key). The same records give the same key, so a cell has the same perturbation
in every table it appears in, and a table requested twice is the same table. Not differentially
private: the perturbation is bounded (at most ``max_perturbation``) and zeros stay zero, so nothing
bounds what a differencing or reconstruction attack learns.

The perturbation table. For each true count c (counts from ``max_perturbation`` up share one row),
the perturbations p with c + p ≥ 0 and |p| ≤ D are drawn with the maximum-entropy distribution
of mean 0 and variance V (probabilities ∝ exp(a·p + b·p²)), where c is too small for V (the most a
mean-0 distribution on [−c, D] can have is c·D) the largest variance it can have; a count of 0 is
never perturbed. Each row spends the key range on its perturbations in proportion to their
probabilities (largest remainders; the symmetric row gives p and −p as many keys), so a cell key
uniform over the range draws p from that row."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.marginals import Workload, marginal_counts
from censusrecon.synth.mechanism import PrivacyError

NOT_DP = ("the cell key method is not differentially private: its perturbation is bounded and zeros stay zero, "
          "so no ε bounds what the perturbed tables reveal")


@dataclass(frozen=True)
class PerturbationTable:
    """``table[min(c, D), k]`` is the perturbation of a cell of true count c and cell key k."""

    max_perturbation: int
    variance: float
    key_range: int
    table: np.ndarray  # (D + 1) × key_range, int64
    row_variance: np.ndarray  # the variance each row has after discretisation

    def perturb(self, counts: np.ndarray, keys: np.ndarray) -> np.ndarray:
        counts = np.asarray(counts, dtype=np.int64)
        return counts + self.table[np.minimum(counts, self.max_perturbation), np.asarray(keys, dtype=np.int64)]


def _row_probabilities(c: int, D: int, V: float) -> tuple[np.ndarray, np.ndarray]:
    """Support and maximum-entropy probabilities of mean 0 and variance min(V, feasible) for count c."""
    from scipy.optimize import least_squares

    if c == 0:
        return np.zeros(1), np.ones(1)
    lo = -min(c, D)
    p = np.arange(lo, D + 1, dtype=np.float64)
    v = min(V, 0.98 * (-lo) * D)  # the largest variance a mean-0 law on [lo, D] can have is (-lo)·D

    def probs(x):
        z = x[0] * p + x[1] * p * p
        w = np.exp(z - z.max())
        return w / w.sum()

    def moments(x):
        q = probs(x)
        m = q @ p
        return [m, q @ (p * p) - m * m - v]

    sol = least_squares(moments, x0=[0.0, -1.0 / (2 * max(v, 1e-3))], xtol=1e-14, ftol=1e-14, gtol=1e-14)
    return p, probs(sol.x)


def perturbation_table(max_perturbation: int, variance: float, key_range: int = 256) -> PerturbationTable:
    """The table for maximum perturbation D and variance V over record keys 0 … key_range − 1."""
    D = int(max_perturbation)
    if D < 1 or not variance > 0 or key_range < 2 * D + 1:
        raise PrivacyError(f"a perturbation table needs max_perturbation ≥ 1, variance > 0 and a key range of at least "
                           f"2·D + 1 keys; got D = {max_perturbation}, V = {variance}, {key_range} keys")
    rows, variances = [], []
    for c in range(D + 1):
        p, q = _row_probabilities(c, D, variance)
        n = np.floor(q * key_range).astype(np.int64)
        if c >= D:  # the symmetric row: p and -p get as many keys, the rest go to 0 (mean exactly 0)
            n = np.minimum(n, n[::-1])
            n[D] += key_range - int(n.sum())
        else:
            left = key_range - int(n.sum())
            n[np.argsort(-(q * key_range - n), kind="stable")[:left]] += 1  # largest remainders
        row = np.repeat(p.astype(np.int64), n)
        rows.append(row)
        mean = row.mean()
        variances.append(float(((row - mean) ** 2).mean()))
    return PerturbationTable(D, float(variance), int(key_range), np.stack(rows), np.array(variances))


def record_keys(n: int, key_range: int, rng: np.random.Generator) -> np.ndarray:
    """One uniform record key per record (drawn once, kept with the microdata)."""
    return rng.integers(0, key_range, size=n, dtype=np.int64)


def cell_keys(data: Dataset, workload, keys: np.ndarray, key_range: int) -> np.ndarray:
    """Each published cell's key: the sum of its records' keys modulo the key range (exact in float64
    below 2⁵³, far above any census cell's sum)."""
    w = np.asarray(keys, dtype=np.float64)
    if isinstance(workload, Workload):
        sums = np.concatenate([marginal_counts(data, m, w) for m in workload.marginals])
    else:
        sums = workload.counts(data, w)
    return np.rint(sums).astype(np.int64) % key_range


def cell_key_tables(data: Dataset, workload, table: PerturbationTable, rng: np.random.Generator
                    ) -> tuple[np.ndarray, dict]:
    """The workload's counts perturbed by the cell key method, and facts of the release: the share of
    cells perturbed and of non-zero cells perturbed."""
    from censusrecon.synth.release import workload_counts

    counts = workload_counts(data, workload)
    keys = record_keys(len(data), table.key_range, rng)
    out = table.perturb(counts, cell_keys(data, workload, keys, table.key_range))
    changed = out != counts
    nonzero = counts > 0
    return out, {"cells_perturbed": float(changed.mean()) if len(counts) else 0.0,
                 "nonzero_cells_perturbed": float(changed[nonzero].mean()) if nonzero.any() else 0.0,
                 "max_perturbation": table.max_perturbation, "ptable_variance": table.variance,
                 "key_range": table.key_range}
