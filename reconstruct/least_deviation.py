"""The least-deviation attack on noisy tables: the integer rows whose tables are nearest the published ones (L1)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from censusrecon.microdata.domain import Domain
from censusrecon.reconstruct.exact import highs_instance, highs_lp, highspy_module, query_matrix


@dataclass
class LeastDeviationResult:
    """The least-deviation reconstruction of noisy tables: integer counts per cell of the domain (on
    the LP relaxation's support), the weighted L1 residual Σ |A x − c̃| / scale of the integer
    solution and of the LP bound, and how it was found."""

    status: str
    domain: Domain
    cells: np.ndarray  # domain keys with a positive count
    counts: np.ndarray
    residual: float | None = None
    lp_residual: float | None = None
    lp_support: int = 0
    rounds: int = 0
    seconds: float = 0.0

    @property
    def solved(self) -> bool:
        return self.status.startswith("solved")

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        return self.cells, self.counts

    def facts(self) -> dict:
        return {"status": self.status, "residual": self.residual, "lp_residual": self.lp_residual,
                "lp_support": self.lp_support, "pricing_rounds": self.rounds, "seconds": round(self.seconds, 3)}


def _ld_model(hs, A: sp.csc_matrix, noisy: np.ndarray, weight: np.ndarray, total: int | None, integer: bool):
    """min Σ w_q (u_q + v_q) s.t. A x − u + v = c̃ (and Σ x = total), x, u, v ≥ 0 (x integer if asked).
    Columns: x (A's columns), then u, then v."""
    nq, nx = A.shape
    eye = sp.identity(nq, format="csc")
    M = sp.hstack([A, -eye, eye], format="csc")
    lower, upper = noisy.astype(np.float64), noisy.astype(np.float64)
    if total is not None:
        M = sp.vstack([M, sp.hstack([sp.csr_matrix(np.ones((1, nx))), sp.csr_matrix((1, 2 * nq))])], format="csc")
        lower, upper = np.append(lower, float(total)), np.append(upper, float(total))
    lp = highs_lp(hs, M, np.concatenate([np.zeros(nx), weight, weight]), np.zeros(M.shape[1]),
                  np.full(M.shape[1], hs.kHighsInf), lower, upper)
    if integer:
        lp.integrality_ = [hs.HighsVarType.kInteger] * nx + [hs.HighsVarType.kContinuous] * (2 * nq)
    return highs_instance(hs, lp)


def reconstruct_least_deviation(workload, noisy: np.ndarray, scale, time_limit: float = 300.0,
                                total: int | None = None, max_add: int = 20_000,
                                matrix: sp.csc_matrix | None = None) -> LeastDeviationResult:
    """The maximum-likelihood reconstruction of tables published with Laplace noise: non-negative
    integer counts x per cell of the domain minimising Σ_q |(A x)_q − c̃_q| / scale_q, with the
    declared total (``total``) as an equality.

    Noisy zeros rule nothing out, so every cell of the domain is a candidate. The LP relaxation is
    solved over all of them by column generation (start from the cells no noisy count below 1 rules
    out, add every cell whose reduced cost A_tᵀy is positive under the duals y, until none is: the
    LP optimum over the whole domain); the integer program is then solved over the LP solution's
    support (a restriction: labelled so), within ``time_limit`` seconds. ``matrix`` is the workload's
    :func:`query_matrix` when the caller has it already."""
    hs = highspy_module()
    t0 = time.perf_counter()
    noisy = np.asarray(noisy, dtype=np.float64)
    weight = 1.0 / np.broadcast_to(np.asarray(scale, dtype=np.float64), noisy.shape)
    A = (query_matrix(workload) if matrix is None else matrix).tocsc()
    ncells = A.shape[1]
    # seed: cells whose every query has a noisy count of at least 1
    low = np.full(ncells, np.inf)
    Ar = A.tocsr()
    for i in range(A.shape[0]):
        cols = Ar.indices[Ar.indptr[i]:Ar.indptr[i + 1]]
        low[cols] = np.minimum(low[cols], noisy[i])
    cols = np.flatnonzero(low >= 1)
    if len(cols) > max_add:
        cols = cols[np.argsort(-low[cols], kind="stable")[:max_add]]
    rounds, lp_val, x_lp = 0, None, None
    dom = workload.domain

    def unsolved(**facts) -> LeastDeviationResult:
        return LeastDeviationResult(f"not solved within {time_limit:g} s", dom, np.zeros(0, np.int64),
                                    np.zeros(0, np.int64), rounds=rounds, seconds=time.perf_counter() - t0, **facts)

    while True:
        rounds += 1
        h = _ld_model(hs, A[:, cols], noisy, weight, total, integer=False)
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            return unsolved()
        # HiGHS's run clock adds up over the calls on one instance: the limit is on that total
        h.setOptionValue("time_limit", float(h.getRunTime()) + float(left))
        h.run()
        if h.getModelStatus() != hs.HighsModelStatus.kOptimal:
            return unsolved()
        sol = h.getSolution()
        y = np.asarray(sol.row_dual)[: A.shape[0]]
        x_lp = np.asarray(sol.col_value)[: len(cols)]
        lp_val = h.getInfo().objective_function_value
        # reduced cost of a cell t: 0 − A_tᵀ y (− y_total when the total row is there)
        y_tot = np.asarray(sol.row_dual)[A.shape[0]] if total is not None else 0.0
        reduced = -(A.T @ y) - y_tot
        reduced[cols] = 0.0
        entering = np.flatnonzero(reduced < -1e-7)
        if not len(entering):
            break
        entering = entering[np.argsort(reduced[entering], kind="stable")[:max_add]]
        cols = np.union1d(cols, entering)
    support = cols[x_lp > 1e-9]
    if not len(support):
        support = cols
    h = _ld_model(hs, A[:, support], noisy, weight, total, integer=True)
    left = time_limit - (time.perf_counter() - t0)
    h.setOptionValue("time_limit", float(max(left, 1.0)))
    h.run()
    st = h.getModelStatus()
    info = h.getInfo()
    if st not in (hs.HighsModelStatus.kOptimal, hs.HighsModelStatus.kTimeLimit) or info.primal_solution_status != 2:
        return unsolved(lp_residual=lp_val, lp_support=len(support))
    x = np.rint(np.asarray(h.getSolution().col_value)[: len(support)]).astype(np.int64)
    on = x > 0
    residual = float(np.abs(A[:, support] @ x - noisy) @ weight)
    status = ("solved (least deviation over the LP support)" if st == hs.HighsModelStatus.kOptimal else
              f"solved (least deviation over the LP support; best found within {time_limit:g} s)")
    return LeastDeviationResult(status, dom, support[on].astype(np.int64), x[on], residual, lp_val, len(support),
                                rounds, time.perf_counter() - t0)
