"""Inference attacks on one release: is this person's record in the data (membership), and what is their
secret value (attribute)? Each score reads only what the release publishes and what its adversary knows.

Two adversaries are scored here:

- the *informed* adversary of DP's definition knows every record but the target's, and two candidates for
  the target's record. It compares the release under the two candidates. Where the release declares its noise
  law, it uses the likelihood ratio of that law (:class:`NoiseLaw`); otherwise it counts the release's rows in
  the cells where the candidates differ (:func:`informed_scores`).
- the *realistic* adversary knows only outside data: a reference sample of persons from elsewhere. It scores a
  record by how much more often the release shows its cells than the reference predicts
  (:func:`density_ratio_scores`), the density-ratio idea of DOMIAS and MAMA-MIA on the cells the release
  measures.

Attribute inference (:func:`linear_reconstruction`) follows Annamalai, Gadotti and Rocher (USENIX Security
2024): the adversary knows every person's quasi-identifiers and solves for the secrets that best explain
the published cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import sparse

from censusrecon.microdata.errors import CensusReconError

#: the rows of records scored at once when their cells are found (a dense (rows × cells) mask each)
_CHUNK_CELLS = 1 << 23


class InferenceError(CensusReconError):
    """An inference attack asked of something it cannot attack (no targets, no noise law, a bad FPR)."""


def cell_incidence(workload, codes: np.ndarray) -> sparse.csr_matrix:
    """Which published cells each record lies in: an (records × cells) 0/1 matrix in workload order.

    Works for k-way marginals and census tables alike (each cell a product of value sets).

    >>> from censusrecon.microdata.domain import Domain
    >>> from censusrecon.microdata.marginals import Workload
    >>> w = Workload(Domain.from_sizes({"A": 2, "B": 3}), (("A",), ("A", "B")))
    >>> cell_incidence(w, np.array([[1, 2], [0, 0]])).toarray().tolist()
    [[0, 1, 0, 0, 0, 0, 0, 1], [1, 0, 1, 0, 0, 0, 0, 0]]
    """
    from censusrecon.reconstruct.margins import product_structure

    member, index = product_structure(workload)
    codes = np.asarray(codes, dtype=np.int64).reshape(-1, index.shape[1])
    n_cells = index.shape[0]
    if not len(codes):
        return sparse.csr_matrix((0, n_cells), dtype=np.int64)
    # per attribute, each value's published cells (values × cells): a record's row is then one gather an attribute
    allowed = [np.ascontiguousarray(np.asarray(m, dtype=bool)[:, index[:, j]]) for j, m in enumerate(member)]
    # records sharing every value share their cells: each distinct record is worked out once
    distinct, back = np.unique(codes, axis=0, return_inverse=True)
    step = max(1, _CHUNK_CELLS // max(n_cells, 1))
    rows, cols = [], []
    for start in range(0, len(distinct), step):
        c = distinct[start:start + step]
        hit = allowed[0][c[:, 0]]
        for j in range(1, len(allowed)):
            hit &= allowed[j][c[:, j]]
        r, k = np.nonzero(hit)
        rows.append(r + start)
        cols.append(k)
    r, k = np.concatenate(rows), np.concatenate(cols)
    ones = sparse.csr_matrix((np.ones(len(r), np.int64), (r, k)), shape=(len(distinct), n_cells))
    return ones[np.asarray(back).ravel()]


@dataclass(frozen=True)
class NoiseLaw:
    """The noise a release declares on each published count: ``discrete_laplace`` of scale b (P(k) ∝ e^(−|k|/b))
    or ``gaussian`` of standard deviation σ. The informed adversary's likelihood ratio reads it.

    >>> NoiseLaw("discrete_laplace", 2.0).log_ratio(np.array([[5.0]]), np.array([5]), np.array([4])).tolist()
    [0.5]
    """

    family: Literal["discrete_laplace", "gaussian"]
    scale: float

    def __post_init__(self):
        if self.family not in ("discrete_laplace", "gaussian"):
            raise InferenceError(f"a noise law is discrete_laplace or gaussian, got {self.family!r}")
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise InferenceError(f"a noise law's scale must be a positive number, got {self.scale!r}")

    @classmethod
    def fit(cls, family: str, noise: np.ndarray) -> "NoiseLaw":
        """The law of ``family`` whose scale best fits observed ``noise`` (a program's output minus the counts the
        adversary knows): for the discrete Laplace, b from the mean absolute noise (E|Z| = 2α/(1 − α²), α =
        e^(−1/b)); for the Gaussian, σ from the root mean square.

        >>> z = np.random.default_rng(0).laplace(0, 3.0, 200_000).round()
        >>> round(NoiseLaw.fit("discrete_laplace", z).scale, 1)
        3.0
        """
        z = np.abs(np.asarray(noise, dtype=np.float64).ravel())
        if not z.size:
            raise InferenceError("a noise law is fitted to some noise: none was drawn")
        if family == "gaussian":
            return cls(family, max(float(np.sqrt(np.mean(z ** 2))), 1e-9))
        m = max(float(z.mean()), 1e-9)
        alpha = (np.sqrt(1 + m * m) - 1) / m  # the root in (0, 1) of m·α² + 2α − m = 0
        return cls(family, float(-1.0 / np.log(alpha)) if alpha > 0 else 1e-9)

    def log_ratio(self, observed: np.ndarray, x_in: np.ndarray, x_out: np.ndarray) -> np.ndarray:
        """log P(observed | counts x_in) − log P(observed | counts x_out), summed over the cells (last axis)."""
        y = np.asarray(observed, dtype=np.float64)
        a, b = np.asarray(x_in, dtype=np.float64), np.asarray(x_out, dtype=np.float64)
        if self.family == "discrete_laplace":
            return ((np.abs(y - b) - np.abs(y - a)) / self.scale).sum(axis=-1)
        return (((y - b) ** 2 - (y - a) ** 2) / (2 * self.scale ** 2)).sum(axis=-1)


def informed_scores(observed: np.ndarray, x_in: np.ndarray, x_out: np.ndarray, law: NoiseLaw | None) -> np.ndarray:
    """The informed adversary's score of releases (one row each of ``observed``: the published counts in the
    cells where the two candidates differ), high when the target's true record is in. ``x_in``/``x_out``: those
    cells' counts with the target's record and with the other candidate, which this adversary computes from
    what it knows. With the release's ``law``, the likelihood ratio (Neyman–Pearson's best test); without one
    (rows fitted to the tables, rows drawn from a histogram), the counts moved toward each candidate, signed.

    >>> informed_scores(np.array([[3, 1], [2, 2]]), np.array([3, 1]), np.array([2, 2]), None).tolist()
    [2.0, 0.0]
    """
    observed = np.atleast_2d(np.asarray(observed, dtype=np.float64))
    x_in, x_out = np.asarray(x_in, dtype=np.float64), np.asarray(x_out, dtype=np.float64)
    if observed.shape[1] != x_in.size or x_in.shape != x_out.shape:
        raise InferenceError(f"the releases give {observed.shape[1]} cells, the candidates {x_in.size} and "
                             f"{x_out.size}: one count per cell where the candidates differ")
    if law is not None:
        return law.log_ratio(observed, x_in, x_out)
    return observed @ (x_in - x_out)


def density_ratio_scores(incidence: sparse.spmatrix, published: np.ndarray, expected: np.ndarray,
                         smoothing: float = 1.0) -> np.ndarray:
    """The realistic adversary's score of each record (a row of ``incidence``): the sum over the cells it lies
    in of log((published + s) / (expected + s)), where ``expected`` is what the reference predicts for the
    release's cells (the reference's counts scaled to the release's size). A member raises its own cells; a
    non-member does not.

    >>> inc = sparse.csr_matrix(np.array([[1, 0], [0, 1]]))
    >>> density_ratio_scores(inc, np.array([3.0, 1.0]), np.array([1.0, 1.0])).round(3).tolist()
    [0.693, 0.0]
    """
    if smoothing <= 0:
        raise InferenceError(f"the density ratio's smoothing must be positive, got {smoothing}")
    y = np.clip(np.asarray(published, dtype=np.float64), 0, None)
    e = np.clip(np.asarray(expected, dtype=np.float64), 0, None)
    if y.shape != e.shape or y.size != incidence.shape[1]:
        raise InferenceError(f"published ({y.size}), expected ({e.size}) and the records' cells ({incidence.shape[1]}) "
                             "must be the same cells")
    return np.asarray(incidence @ (np.log(y + smoothing) - np.log(e + smoothing))).ravel()


def reference_log_density(incidence: sparse.spmatrix, reference: np.ndarray, smoothing: float = 0.5) -> np.ndarray:
    """How typical each record is under the reference: the sum over its cells of the log of the cell's share of
    the reference (smoothed). The lowest are the atypical persons, where membership risk concentrates.

    >>> inc = sparse.csr_matrix(np.array([[1, 0], [0, 1]]))
    >>> (reference_log_density(inc, np.array([99.0, 1.0])) < 0).tolist()
    [True, True]
    """
    r = np.clip(np.asarray(reference, dtype=np.float64), 0, None)
    share = (r + smoothing) / (r.sum() + smoothing * r.size)
    return np.asarray(incidence @ np.log(share)).ravel()


#: the most unknowns (classes × secret values) a linear reconstruction takes on: beyond, it is refused as too large
MAX_UNKNOWNS = 30_000


def linear_reconstruction(workload, published: np.ndarray, codes: np.ndarray, secret: int,
                          time_limit: float = 60.0, max_unknowns: int = MAX_UNKNOWNS) -> np.ndarray:
    """Attribute inference by linear reconstruction (Annamalai, Gadotti and Rocher 2024): the adversary knows
    every person's quasi-identifiers (their ``codes`` but column ``secret``, which is ignored) and the release's
    cell counts ``published`` (workload order). Persons with the same quasi-identifiers form a class; the
    unknowns are how many of each class hold each secret value. The linear program (HiGHS, through SciPy)
    chooses them to minimise the absolute gap to every published cell that depends on the secret. Each person
    is predicted the secret value its class holds most. More than ``max_unknowns`` unknowns are refused
    (:class:`InferenceError`): the program's size, not its answer, would decide how long an evaluation takes.

    Returns the predicted secret code of each person.

    >>> from censusrecon.microdata.domain import Domain
    >>> from censusrecon.microdata.marginals import Workload
    >>> w = Workload(Domain.from_sizes({"A": 4, "S": 2}), (("A", "S"),))
    >>> codes = np.array([[a, a % 2] for a in (0, 1, 1, 2, 3, 3)])
    >>> counts = np.bincount(codes[:, 0] * 2 + codes[:, 1], minlength=8)
    >>> linear_reconstruction(w, counts, codes, secret=1).tolist()
    [0, 1, 1, 0, 1, 1]
    """
    from scipy.optimize import linprog

    codes = np.asarray(codes, dtype=np.int64)
    if codes.ndim != 2 or not len(codes):
        raise InferenceError("attribute inference needs the quasi-identifiers of at least one person")
    sizes = workload.domain.sizes
    if not 0 <= secret < len(sizes):
        raise InferenceError(f"the secret is attribute {secret}, but the domain has {len(sizes)} attributes")
    qi = np.delete(codes, secret, axis=1)
    classes, cls_of, n_of = np.unique(qi, axis=0, return_inverse=True, return_counts=True)
    cls_of = cls_of.ravel()
    V, K = sizes[secret], len(classes)
    if K * V > max_unknowns:
        raise InferenceError(f"the linear reconstruction would have {K * V:,} unknowns ({K:,} classes of persons × "
                             f"{V} secret values), over {max_unknowns:,}: choose a secret with fewer values "
                             "(release.inference.secret)")
    # every (class, secret value) pair as a record: which cells it lies in
    pairs = np.insert(np.repeat(classes, V, axis=0), secret, np.tile(np.arange(V), K), axis=1)
    inc = cell_incidence(workload, pairs).T.tocsr()  # (cells × K·V)
    # the cells that depend on the secret: some class lies in them for some values only
    held = (inc @ sparse.kron(sparse.identity(K, format="csr"), np.ones((V, 1)), format="csr")).tocsr()  # (cells × K)
    partial = held.copy()
    partial.data = ((partial.data > 0) & (partial.data < V)).astype(np.int64)
    depends = np.asarray(partial.sum(axis=1)).ravel() > 0
    A = inc[depends]
    y = np.asarray(published, dtype=np.float64)[depends]
    C = A.shape[0]
    if C == 0:  # nothing published depends on the secret: every class is as likely to hold any value
        return np.zeros(len(codes), dtype=np.int64)
    # variables: x (K·V, ≥ 0), then t (C, ≥ 0) with −t ≤ A x − y ≤ t; Σ_v x_kv = n_k; minimise Σ t
    eye = sparse.identity(C, format="csr")
    A_ub = sparse.vstack([sparse.hstack([A, -eye]), sparse.hstack([-A, -eye])], format="csr")
    b_ub = np.concatenate([y, -y])
    A_eq = sparse.hstack([sparse.kron(sparse.identity(K), np.ones((1, V))), sparse.csr_matrix((K, C))], format="csr")
    cost = np.concatenate([np.zeros(K * V), np.ones(C)])
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=n_of.astype(np.float64), bounds=(0, None),
                  method="highs", options={"time_limit": float(time_limit)})
    if res.x is None:
        raise InferenceError(f"the linear reconstruction found no solution ({res.message})")
    x = res.x[:K * V].reshape(K, V)
    return np.argmax(x, axis=1)[cls_of].astype(np.int64)
