"""Exact reconstruction by integer programming (HiGHS) from published product-query tables, with
certificates: rows that every dataset consistent with the tables contains."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from censusrecon.microdata.domain import Domain
from censusrecon.microdata.errors import CensusReconError

log = logging.getLogger(__name__)


class ExactError(CensusReconError):
    """HiGHS is missing, or the tables cannot be modelled; the message says which."""


def highspy_module():
    try:
        import highspy
    except ImportError:
        raise ExactError("exact reconstruction needs HiGHS: pip install highspy") from None
    return highspy


@contextlib.contextmanager
def _quiet_stdout():
    """HiGHS prints its banner from C++ on the first instance, before any option can stop it: hold
    file descriptor 1 on /dev/null meanwhile, so a command's output stays its own."""
    import os
    import sys

    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no real stdout (some notebook kernels): nothing to hold
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def highs_lp(hs, matrix: sp.spmatrix, cost, col_lower, col_upper, row_lower, row_upper):
    """A HiGHS LP: min costᵀx, col_lower ≤ x ≤ col_upper, row_lower ≤ matrix·x ≤ row_upper."""
    A = sp.csc_matrix(matrix)
    lp = hs.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.col_cost_ = np.asarray(cost, dtype=np.float64)
    lp.col_lower_, lp.col_upper_ = np.asarray(col_lower, np.float64), np.asarray(col_upper, np.float64)
    lp.row_lower_, lp.row_upper_ = np.asarray(row_lower, np.float64), np.asarray(row_upper, np.float64)
    lp.a_matrix_.format_ = hs.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = A.shape[1], A.shape[0]
    return lp


def highs_instance(hs, model, threads: int | None = None):
    """A silent HiGHS instance holding ``model`` (an LP or a model with a Hessian)."""
    with _quiet_stdout():
        h = hs.Highs()
        h.setOptionValue("output_flag", False)
    if threads:
        h.setOptionValue("threads", int(threads))
    h.passModel(model)
    return h


@dataclass
class CountModel:
    """The count form of the published tables: one non-negative integer per (block, person type)
    that no published zero rules out; one equality per published non-zero cell.

    ``codes`` holds each variable's row (BLOCK and every person attribute, domain order); ``A``
    (cells × variables) the cells each variable is counted in; ``rhs`` the published counts.
    Published zeros are applied before the solver sees anything: a variable inside any cell
    published as 0 is not a variable at all (it is 0 in every consistent dataset)."""

    domain: Domain
    codes: np.ndarray
    A: sp.csr_matrix
    rhs: np.ndarray
    cells_published: int
    cells_zero: int
    variables_before: int
    empty_nonzero_cells: int = 0  # a non-zero cell with no variable left: the tables are inconsistent
    row_levels: np.ndarray | None = None  # each row's table level ("block", "tract", ...), where the workload says

    @property
    def num_variables(self) -> int:
        return len(self.codes)

    def keys(self) -> np.ndarray:
        return self.domain.encode(self.codes)


class ModelTooLarge(ExactError):
    """The count model was not built by its deadline: ``model`` holds its variables (the cells no published
    zero rules out) and no constraint yet."""

    def __init__(self, message: str, model: "CountModel"):
        super().__init__(message)
        self.model = model


def build_count_model(workload, counts: np.ndarray, chunk: int = 2_000_000,
                      deadline: float | None = None) -> CountModel:
    """The count-form model of ``workload``'s published ``counts`` (int, workload order).

    ``workload`` is a product-query workload (census SF1 tables, the reference set, declared
    tables): each query a product of per-attribute value sets, BLOCK included when the tables are
    published per block. Past ``deadline`` (a ``time.perf_counter()`` value) it raises
    :class:`ModelTooLarge`: tables with few zeros (noisy ones, made consistent) leave nearly every cell of
    the domain a variable, and the model then takes longer than any solve."""
    counts = np.asarray(counts)
    if counts.shape != (workload.num_queries,):
        raise ExactError(f"need one published count per query ({workload.num_queries}), got {counts.shape}")
    if not np.issubdtype(counts.dtype, np.integer) or (counts < 0).any():
        raise ExactError("exact reconstruction takes the published cell counts as non-negative integers")
    dom = workload.domain
    q = np.array(workload.queries, dtype=np.int64).reshape(len(workload.queries), len(dom))
    vs = workload.value_sets
    allowed = np.ones(dom.sizes, dtype=bool)
    d = len(dom)
    # each value set once, as an index array shaped to broadcast along its axis (an open mesh)
    axes = [[np.array(sorted(v), dtype=np.int64).reshape([-1 if k == j else 1 for k in range(d)]) for v in vs[j]]
            for j in range(d)]
    for i in np.flatnonzero(counts == 0):
        allowed[tuple(axes[j][q[i, j]] for j in range(d))] = False
    codes = np.argwhere(allowed).astype(np.int64)
    nz = np.flatnonzero(counts > 0)
    member = [workload.membership(j).astype(bool) for j in range(len(dom))]
    rows, cols = [], []
    step = max(1, chunk // max(len(codes), 1))
    for start in range(0, len(nz), step):
        if deadline is not None and time.perf_counter() > deadline:
            unbuilt = CountModel(dom, codes, sp.csr_matrix((0, len(codes))), np.zeros(0), len(counts),
                                 int((counts == 0).sum()), int(np.prod(dom.sizes)))
            raise ModelTooLarge(f"the count model ({len(codes):,} variables, {len(nz):,} non-zero cells) was not "
                                f"built in time: {start:,} of its {len(nz):,} cells done", unbuilt)
        part = nz[start:start + step]
        hit = np.ones((len(codes), len(part)), dtype=bool)
        for j in range(len(dom)):
            hit &= member[j][codes[:, j]][:, q[part, j]]
        v, c = np.nonzero(hit)
        rows.append(c + start)
        cols.append(v)
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    A = sp.csr_matrix((np.ones(len(r)), (r, c)), shape=(len(nz), len(codes)))
    empty = int((np.diff(A.indptr) == 0).sum())
    levels = getattr(workload, "query_levels", None)
    return CountModel(dom, codes, A, counts[nz].astype(np.float64), len(counts), int((counts == 0).sum()),
                      int(np.prod(dom.sizes)), empty, np.asarray(levels, dtype=object)[nz] if levels else None)


@dataclass
class ExactResult:
    """One unit's exact reconstruction: the status, the solved counts, each support cell's
    certified lower bound (the count every consistent dataset has at least), per-block facts."""

    status: str  # "solved", "not solved within N s", "infeasible"
    model: CountModel
    counts: np.ndarray | None = None  # solved count per variable
    certified: np.ndarray | None = None  # certified lower bound per variable (0: not certified)
    certification_complete: bool = False
    blocks: dict = field(default_factory=dict)
    #: per block, zero solution variability on the coarse schema (``coarsen``: True, False, or None
    #: when the time limit left it undecided) on all the tables, and the Bureau's solution
    #: variability ("solvar", percent, on its block relaxation: :func:`block_solution_variability`);
    #: empty when no coarse schema was asked for
    blocks_coarse: dict = field(default_factory=dict)
    coarse_complete: bool = False
    seconds_coarse: float = 0.0
    #: every block's Bureau solution variability measured (in ``blocks_coarse``: "solvar", percent)
    solvar_complete: bool = False
    #: solution variability on other keys (``solvar_keys``), in ``blocks_coarse`` as "solvar_<name>";
    #: per name, whether every block's was measured
    solvar_keys_complete: dict = field(default_factory=dict)
    seconds_solvar: float = 0.0
    seconds_solve: float = 0.0
    seconds_certify: float = 0.0
    integer_solves: int = 0
    lp_solves: int = 0

    @property
    def solved(self) -> bool:
        return self.status == "solved"

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, solved counts) of the solution's support."""
        on = self.counts > 0
        return self.model.keys()[on], self.counts[on]

    def certified_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, certified counts) of the rows every consistent dataset contains."""
        on = self.certified > 0
        return self.model.keys()[on], self.certified[on]

    def facts(self) -> dict:
        blocks = self.blocks
        out = {"status": self.status, "variables": self.model.num_variables,
               "variables_before_zeros": self.model.variables_before, "cells": self.model.cells_published,
               "cells_zero": self.model.cells_zero, "seconds_solve": round(self.seconds_solve, 3),
               "seconds_certify": round(self.seconds_certify, 3), "integer_solves": self.integer_solves,
               "lp_solves": self.lp_solves}
        if self.solved:
            out.update(persons=int(self.counts.sum()), support_rows=int((self.counts > 0).sum()))
        if self.certified is not None:
            out.update(certified_rows=int((self.certified > 0).sum()), certified_persons=int(self.certified.sum()),
                       certification_complete=self.certification_complete,
                       blocks_solved=len(blocks), blocks_zero_variability=sum(b["zero_variability"] for b in blocks.values()),
                       persons_in_zero_variability_blocks=sum(b["persons"] for b in blocks.values() if b["zero_variability"]))
        if self.blocks_coarse:
            bc = self.blocks_coarse.values()
            out.update(coarse_blocks=len(self.blocks_coarse), coarse_complete=self.coarse_complete,
                       coarse_blocks_zero_variability=sum(b["zero_variability"] is True for b in bc),
                       coarse_blocks_undecided=sum(b["zero_variability"] is None for b in bc),
                       coarse_persons_in_zero_variability_blocks=sum(b["persons"] for b in bc
                                                                     if b["zero_variability"] is True),
                       seconds_coarse=round(self.seconds_coarse, 3))
            if any(b.get("solvar") is not None for b in bc):
                out.update(_solvar_facts(bc, "", self.solvar_complete), seconds_solvar=round(self.seconds_solvar, 3))
            for name, complete in self.solvar_keys_complete.items():
                out.update(_solvar_facts(bc, f"_{name}", complete))
        return out


def _solvar_facts(blocks, suffix: str, complete: bool) -> dict:
    """The facts of the blocks' solution variability on one key (``solvar<suffix>`` in each block's entry):
    blocks measured, those of solvar 0 and their persons, and the cumulative solvar (persons-weighted)."""
    key = f"solvar{suffix}"
    on = [b for b in blocks if b.get(key) is not None]
    n = sum(b["persons"] for b in on)
    return {f"{key}_complete": complete, f"{key}_blocks": len(on), f"{key}_blocks_zero": sum(b[key] == 0 for b in on),
            f"{key}_persons_in_zero_blocks": sum(b["persons"] for b in on if b[key] == 0),
            f"cum{key}": round(sum(b["persons"] * b[key] for b in on) / n, 3) if n else 0.0}


class ExactSolver:
    """The count model in HiGHS, twice: as an integer program (feasibility, a dummy objective, as
    the Bureau's) and as its LP relaxation, each kept and changed in place (a bound or a cost),
    never rebuilt, for the hundreds of questions a certification asks."""

    def __init__(self, model: CountModel, time_limit: float = 300.0, threads: int | None = None):
        hs = highspy_module()
        self.hs, self.model = hs, model
        self.deadline = time.perf_counter() + float(time_limit)
        self.time_limit = float(time_limit)
        V = model.num_variables
        lp = highs_lp(hs, model.A, np.zeros(V), np.zeros(V), np.full(V, hs.kHighsInf), model.rhs, model.rhs)
        self.relaxed = highs_instance(hs, lp, threads)
        lp.integrality_ = [hs.HighsVarType.kInteger] * V
        self.mip = highs_instance(hs, lp, threads)
        self.integer_solves = self.lp_solves = 0

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def _run(self, h) -> str:
        left = self.left()
        if left <= 0:
            return "time"
        # HiGHS's run clock adds up over the calls on one instance: the limit is on that total
        h.setOptionValue("time_limit", float(h.getRunTime()) + float(left))
        h.run()
        st = h.getModelStatus()
        S = self.hs.HighsModelStatus
        if st == S.kOptimal:
            return "feasible"
        if st == S.kInfeasible:
            return "infeasible"
        if st in (S.kTimeLimit, S.kInterrupt):
            return "time"
        if st == S.kUnbounded:
            return "feasible"
        return "time" if self.left() <= 0 else "unknown"

    def solve(self) -> tuple[str, np.ndarray | None]:
        self.integer_solves += 1
        out = self._run(self.mip)
        if out != "feasible":
            return out, None
        return out, np.rint(np.asarray(self.mip.getSolution().col_value)).astype(np.int64)

    def lp_min(self, v: int) -> tuple[float, bool] | None:
        """The LP relaxation's minimum of variable v, and whether the LP's optimal point is integral
        (then it is an integer solution of the tables with x_v at that minimum); None when out of
        time. The objective is read before the cost is reset: HiGHS clears its objective value on
        any change to the model."""
        h = self.relaxed
        h.changeColCost(int(v), 1.0)
        self.lp_solves += 1
        out = self._run(h)
        value, integral = None, False
        if out == "feasible":
            value = float(h.getInfo().objective_function_value)
            x = np.asarray(h.getSolution().col_value)
            integral = bool(np.all(np.abs(x - np.rint(x)) <= 1e-7))
        h.changeColCost(int(v), 0.0)
        return None if value is None else (value, integral)

    def _lp_sum(self, columns: np.ndarray, sign: float) -> tuple[float, np.ndarray] | None:
        """The LP relaxation's minimum of ``sign`` × the sum of ``columns``, and its optimal point;
        None when out of time or infeasible. The objective is read before the costs are reset (HiGHS
        clears it on any change to the model)."""
        h = self.relaxed
        cols = np.asarray(columns, np.int32)
        h.changeColsCost(len(cols), cols, np.full(len(cols), sign))
        self.lp_solves += 1
        got = None
        if self._run(h) == "feasible":
            got = (float(h.getInfo().objective_function_value), np.asarray(h.getSolution().col_value).copy())
        h.changeColsCost(len(cols), cols, np.zeros(len(cols)))
        return got

    def lp_range(self, columns: np.ndarray) -> tuple[float | None, float | None]:
        """(min, max) of the sum of ``columns`` over the LP relaxation."""
        lo, hi = self._lp_sum(columns, 1.0), self._lp_sum(columns, -1.0)
        return (None if lo is None else lo[0]), (None if hi is None else -hi[0])

    def lp_min_sum(self, columns: np.ndarray) -> tuple[float, np.ndarray] | None:
        """The LP relaxation's minimum of the sum of ``columns`` and the optimal point; None when
        out of time."""
        return self._lp_sum(columns, 1.0)

    def solve_with_sum_at_most(self, columns: np.ndarray, upper: int) -> tuple[str, np.ndarray | None]:
        """An integer solution with the sum of ``columns`` at most ``upper``: ("feasible", x),
        ("infeasible", None) or ("time", None). The bounding row is removed afterwards."""
        h = self.mip
        cols = np.asarray(columns, np.int32)
        h.addRow(-self.hs.kHighsInf, float(upper), len(cols), cols, np.ones(len(cols)))
        row = h.getNumRow() - 1
        self.integer_solves += 1
        out = self._run(h)
        x = np.rint(np.asarray(h.getSolution().col_value)).astype(np.int64) if out == "feasible" else None
        h.deleteRows(1, np.array([row], np.int32))
        return out, x

    def feasible_with_upper(self, v: int, upper: int) -> str:
        """Is there an integer solution with x_v ≤ upper? ("feasible", "infeasible" or "time")."""
        self.mip.changeColBounds(int(v), 0.0, float(upper))
        self.integer_solves += 1
        out = self._run(self.mip)
        self.mip.changeColBounds(int(v), 0.0, self.hs.kHighsInf)
        return out


def certify(solver: ExactSolver, variables: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, bool]:
    """For each variable (with its value in some solution), the count every integer solution has at
    least: its value when "x_v ≤ value − 1" is infeasible, else 1 when "x_v ≤ 0" is, else the LP
    bound. The LP relaxation's minimum, rounded up, is tried first and often settles it without an
    integer solve. Returns (levels, complete: False when the time limit cut it short; unreached
    variables keep level 0, which claims nothing)."""
    levels = np.zeros(len(variables), dtype=np.int64)
    for i, (v, val) in enumerate(zip(variables, values)):
        if solver.left() <= 0:
            return levels, False
        got = solver.lp_min(v)
        if got is None:
            return levels, False
        lo, integral = got
        floor = int(np.ceil(lo - 1e-6))
        if floor >= val:
            levels[i] = val
            continue
        if integral:  # an integer solution at the LP's minimum: no integer solve can raise the level
            levels[i] = max(floor, 0)
            continue
        out = solver.feasible_with_upper(v, val - 1)
        if out == "time":
            levels[i] = max(floor, 0)
            return levels, False
        if out == "infeasible":
            levels[i] = val
            continue
        levels[i] = max(floor, 0)
        if floor < 1 and val >= 2:  # for val = 1, "≤ 0" is the program just solved
            out = solver.feasible_with_upper(v, 0)
            if out == "time":
                return levels, False
            if out == "infeasible":
                levels[i] = 1
    return levels, True


def _coarse_groups(model: CountModel, coarsen: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each variable's block, and its coarse cell (a group id: the variable's row with each attribute
    of ``coarsen`` mapped to its group, e.g. single-year age to the Bureau's 38 bins)."""
    names = list(model.domain.names)
    codes = model.codes.copy()
    for attr, groups in coarsen.items():
        if attr in names:
            j = names.index(attr)
            codes[:, j] = np.asarray(groups)[codes[:, j]]
    block = codes[:, names.index("BLOCK")] if "BLOCK" in names else np.zeros(len(codes), np.int64)
    _, gid = np.unique(codes, axis=0, return_inverse=True)
    return block, gid.ravel()


def _own_rows(A: sp.spmatrix, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which rows (cells) of ``A`` have all their variables in one block (that block's own table
    cells), and each row's lowest block."""
    A = sp.csr_matrix(A)
    nz_rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    b_of = block[A.indices]
    lo = np.full(A.shape[0], np.iinfo(np.int64).max)
    hi = np.full(A.shape[0], np.iinfo(np.int64).min)
    np.minimum.at(lo, nz_rows, b_of)
    np.maximum.at(hi, nz_rows, b_of)
    return lo == hi, lo


def block_solution_variability(model: CountModel, x: np.ndarray, coarsen: dict[str, np.ndarray],
                               deadline: float, block_time_limit: float = 30.0) -> tuple[dict, bool]:
    """The Census Bureau's solution variability of each block (HDSR 2025 supplement, Eqs. 4.6, 4.9,
    4.10): solvar(b) = 100 × max L1(Hist(x_b), Hist(y_b)) / (2 N_b) over every y_b of the block's
    relaxed problem, on the coarse schema (``coarsen``: the Bureau's 38 age bins): the block's own
    tables as equalities, the tables spanning several blocks (tract tables) as ≤ with the block's
    variables only, classified by table as the Bureau's code does (a tract table's cell is ≤ even where
    the published zeros leave all its variables in one block). It is the share of the block's records that can differ from ``x``, an upper
    bound for the full tables, whose feasible set the relaxation contains (x_b is feasible in it).

    With the block total fixed (N_b), L1 = 2 (N_b − Σ_g min(y_g, x_g)), so the integer program
    minimises Σ_g m_g over the cells g of x_b's support with m_g = min(y_g, x_g) (one binary each:
    m_g ≥ y_g − N_b w_g, m_g ≥ x_g w_g). A block whose program the time limit cuts gets the bound
    its dual bound gives (still an upper bound on solvar; ``exact`` False). Returns ({block:
    {"solvar": percent or None (no time left), "exact": bool, "persons": N_b}}, complete)."""
    hs = highspy_module()
    block, gid = _coarse_groups(model, coarsen)
    A = model.A.tocsc()
    own, _ = _own_rows(model.A, block)
    if model.row_levels is not None:  # the Bureau classifies rows by table: a tract table's row stays ≤ even
        own &= model.row_levels == "block"  # where the published zeros leave its variables in one block
    out, complete = {}, True
    for b in np.unique(block[x > 0]).tolist():
        cols = np.flatnonzero(block == b)
        n_b = int(x[cols].sum())
        left = deadline - time.perf_counter()
        if left <= 0:
            out[b] = {"solvar": None, "exact": False, "persons": n_b}
            complete = False
            continue
        sub = A[:, cols].tocsr()
        rows = np.flatnonzero(np.diff(sub.indptr) > 0)
        sub = sub[rows]
        row_lo = np.where(own[rows], model.rhs[rows], -hs.kHighsInf)
        row_hi = model.rhs[rows]
        # the coarse cells of x_b's support, and the helper columns m_g (continuous) and w_g (binary)
        g_local, g_of_col = np.unique(gid[cols], return_inverse=True)
        xg = np.bincount(g_of_col, weights=x[cols], minlength=len(g_local))
        supp = np.flatnonzero(xg > 0)
        k, nv = len(supp), len(cols)
        # y_g − m_g − N_b w_g ≤ 0  and  x_g w_g − m_g ≤ 0, for each support cell g
        in_supp = np.flatnonzero(xg[g_of_col] > 0)  # the block's columns in a support cell
        r1_rows = np.concatenate([np.searchsorted(supp, g_of_col[in_supp]), np.arange(k), np.arange(k)])
        r1_cols = np.concatenate([in_supp, nv + np.arange(k), nv + k + np.arange(k)])
        r1_vals = np.concatenate([np.ones(len(in_supp)), -np.ones(k), -np.full(k, float(n_b))])
        r2_rows = np.concatenate([np.arange(k), np.arange(k)])
        r2_cols = np.concatenate([nv + k + np.arange(k), nv + np.arange(k)])
        r2_vals = np.concatenate([xg[supp], -np.ones(k)])
        link = sp.csr_matrix((np.concatenate([r1_vals, r2_vals]),
                              (np.concatenate([r1_rows, k + r2_rows]), np.concatenate([r1_cols, r2_cols]))),
                             shape=(2 * k, nv + 2 * k))
        M = sp.vstack([sp.hstack([sub, sp.csr_matrix((len(rows), 2 * k))]), link], format="csc")
        cost = np.concatenate([np.zeros(nv), np.ones(k), np.zeros(k)])
        upper = np.concatenate([np.full(nv, hs.kHighsInf), np.full(k, hs.kHighsInf), np.ones(k)])
        lp = highs_lp(hs, M, cost, np.zeros(nv + 2 * k), upper, np.concatenate([row_lo, np.full(2 * k, -hs.kHighsInf)]),
                      np.concatenate([row_hi, np.zeros(2 * k)]))
        lp.integrality_ = ([hs.HighsVarType.kInteger] * nv + [hs.HighsVarType.kContinuous] * k
                           + [hs.HighsVarType.kInteger] * k)
        h = highs_instance(hs, lp)
        h.setOptionValue("time_limit", float(min(left, block_time_limit)))
        h.run()
        st = h.getModelStatus()
        if st == hs.HighsModelStatus.kOptimal:
            kept, exact = float(h.getInfo().objective_function_value), True
        else:  # cut by the clock: the dual bound still bounds the minimum from below
            kept, exact = float(h.getInfo().mip_dual_bound), False
            if not np.isfinite(kept):
                kept = 0.0
            complete = False
        differ = min(max(n_b - kept, 0.0), float(n_b))
        if differ < 0.5:  # integral counts: less than one record is none
            differ = 0.0
        out[b] = {"solvar": 100.0 * differ / n_b if n_b else 0.0, "exact": exact, "persons": n_b}
    return out, complete


def coarse_block_variability(solver: ExactSolver, model: CountModel, x: np.ndarray,
                             coarsen: dict[str, np.ndarray]) -> tuple[dict, bool]:
    """Which blocks have zero solution variability on a coarser schema (each attribute of
    ``coarsen`` mapped to its group, e.g. single-year age to the Census Bureau's 38 bins): every
    integer solution of the tables has the block's coarse counts of ``x``.

    A block qualifies when its total is fixed (its LP range is one value) and every coarse cell of
    it in ``x`` has that count at least in every solution: the LP minimum of the cell's sum, rounded
    up, reaches it, or "sum ≤ count − 1" is an infeasible integer program. Any solution met on the
    way (an integral LP optimum, or an integer program's solution) shows at once every block whose
    coarse counts it changes, so most blocks of a large tract are settled by a few solves.
    Returns ({block: {"zero_variability": True | False | None (undecided), "persons"}}, complete)."""
    block, gid = _coarse_groups(model, coarsen)
    ng = int(gid.max()) + 1 if len(gid) else 0
    xg = np.bincount(gid, weights=x, minlength=ng)
    g_block = np.zeros(ng, np.int64)
    g_block[gid] = block
    members = pd.Series(np.arange(len(gid))).groupby(gid).apply(np.asarray).to_dict() if ng else {}
    occupied = np.unique(block[x > 0])
    verdict: dict[int, bool | None] = {int(b): None for b in occupied}

    def refute(y: np.ndarray) -> None:
        yg = np.bincount(gid, weights=y, minlength=ng)
        for b in np.unique(g_block[(xg > 0) & (yg < xg - 0.5)]):
            verdict[int(b)] = False

    # Screens first, on each block's own tables only (the cells whose persons all live in the block):
    # a relaxation of the full LP, so a minimum it proves the full tables prove too; tiny and fast.
    # Small blocks, the zero-variability ones, are mostly settled here.
    local = _BlockLPs(solver, model, block)
    proven = np.zeros(ng, bool)
    fixed_total = {}
    for b in occupied.tolist():
        fixed_total[b] = local.fixed_total(b)
        if fixed_total[b]:
            for g in np.flatnonzero((g_block == b) & (xg > 0)):
                lo = local.min_sum(b, members[g])
                proven[g] = lo is not None and np.ceil(lo - 1e-6) >= xg[g]
    complete = True
    for b in occupied.tolist():  # a block whose total the tables do not fix varies
        if fixed_total[b]:
            continue
        lo, hi = solver.lp_range(np.flatnonzero(block == b))
        if lo is None or hi is None:
            complete = False
            break
        if abs(hi - lo) > 1e-6:
            verdict[b] = False
    if complete:
        for g in np.flatnonzero(xg > 0)[np.argsort(xg[xg > 0], kind="stable")]:
            if verdict[int(g_block[g])] is False or proven[g]:
                continue
            got = solver.lp_min_sum(members[g])
            if got is None:
                complete = False
                break
            lo, y = got
            if np.ceil(lo - 1e-6) >= xg[g]:
                proven[g] = True
                continue
            if np.all(np.abs(y - np.rint(y)) <= 1e-7):  # an integer solution with less in this cell
                refute(np.rint(y))
                continue
            out, y = solver.solve_with_sum_at_most(members[g], int(round(xg[g])) - 1)
            if out == "time" or out == "unknown":
                complete = False
                break
            if out == "infeasible":
                proven[g] = True
            else:
                refute(y)
    for b in verdict:
        if verdict[b] is None:
            cells = np.flatnonzero((g_block == b) & (xg > 0))
            if proven[cells].all():
                verdict[b] = True
    persons = np.bincount(block, weights=x)
    return {b: {"zero_variability": v, "persons": int(persons[b])} for b, v in verdict.items()}, complete


class _BlockLPs:
    """Each block's own tables as a small LP (its variables; the cells whose variables are all in
    it), for lower bounds that hold in the full model: its LP is a relaxation of the full one."""

    def __init__(self, solver: ExactSolver, model: CountModel, block: np.ndarray):
        self.solver, self.hs = solver, solver.hs
        A = model.A.tocsr()
        own, lo = _own_rows(A, block)
        self.A, self.rhs, self.block = A, model.rhs, block
        self.rows_of = pd.Series(np.flatnonzero(own)).groupby(lo[own]).apply(np.asarray).to_dict()
        self.cache: dict = {}

    def _lp(self, b: int):
        if b not in self.cache:
            cols = np.flatnonzero(self.block == b)
            rows = self.rows_of.get(b, np.zeros(0, np.int64))
            sub = self.A[rows][:, cols]
            lp = highs_lp(self.hs, sub, np.zeros(len(cols)), np.zeros(len(cols)), np.full(len(cols), self.hs.kHighsInf),
                          self.rhs[rows], self.rhs[rows])
            self.cache = {b: (highs_instance(self.hs, lp), {c: i for i, c in enumerate(cols.tolist())})}
        return self.cache[b]

    def _sum(self, b: int, columns, sign: float) -> float | None:
        """The block LP's minimum of ``sign`` × the sum of ``columns`` (all in block b); None when
        it has no optimum or no time is left."""
        if self.solver.left() <= 0:
            return None
        h, pos = self._lp(b)
        local = np.array([pos[int(c)] for c in columns], np.int32)
        h.changeColsCost(len(local), local, np.full(len(local), sign))
        self.solver.lp_solves += 1
        h.run()
        ok = h.getModelStatus() == self.hs.HighsModelStatus.kOptimal
        value = float(h.getInfo().objective_function_value) if ok else None
        h.changeColsCost(len(local), local, np.zeros(len(local)))
        return value

    def min_sum(self, b: int, columns: np.ndarray) -> float | None:
        """The block LP's minimum of the sum of ``columns`` (all in block b); None if unbounded or out of time."""
        return self._sum(b, columns, 1.0)

    def fixed_total(self, b: int) -> bool:
        """Whether the block's own tables fix its total (its LP range is one value)."""
        cols = list(self._lp(b)[1])
        lo, neg_hi = self._sum(b, cols, 1.0), None
        if lo is not None:
            neg_hi = self._sum(b, cols, -1.0)
        return neg_hi is not None and abs(-neg_hi - lo) < 1e-6


def reconstruct_exact(workload, counts: np.ndarray, time_limit: float = 300.0, certify_support: bool = True,
                      threads: int | None = None, coarsen: dict[str, np.ndarray] | None = None,
                      solvar_keys: dict[str, dict] | None = None) -> tuple[ExactResult, ExactSolver | None]:
    """Solve the count model of the published tables and certify the solution's support.

    ``coarsen``: the schema of zero variability and of the Bureau's solution variability (its 38 age
    bins); ``solvar_keys``: other schemas its solution variability is also measured on, by name (the
    released code's key: P12's 23 age groups), each block's in ``blocks_coarse`` as "solvar_<name>".

    A block whose every support cell is certified at its solved count, and whose total the
    tables fix, has zero solution variability: its reconstruction is the only one. A unit past
    ``time_limit`` seconds of solving is reported as not solved, never as having no certified rows; the
    model's build has a limit of ``time_limit`` seconds of its own (tables with few zeros, noisy ones made
    consistent, make it longer than any solve): one not built within it is not solved, and says so.
    Returns the result and the live solver (for further certificates)."""
    try:
        model = build_count_model(workload, counts, deadline=time.perf_counter() + time_limit)
    except ModelTooLarge as e:
        return ExactResult(f"not solved within {time_limit:g} s ({e})", e.model), None
    if model.empty_nonzero_cells:
        return ExactResult("infeasible", model), None
    solver = ExactSolver(model, time_limit, threads)
    t0 = time.perf_counter()
    status, x = solver.solve()
    t1 = time.perf_counter()
    if status != "feasible":
        text = {"infeasible": "infeasible", "time": f"not solved within {time_limit:g} s"}.get(
            status, f"not solved within {time_limit:g} s")
        return ExactResult(text, model, seconds_solve=t1 - t0, integer_solves=solver.integer_solves), solver
    res = ExactResult("solved", model, counts=x, seconds_solve=t1 - t0)
    if coarsen:  # first, as they are the Bureau's measures and cheaper than every row's certificate:
        # its solution variability (small programs, one a block), then zero variability on all the tables
        solvar, res.solvar_complete = block_solution_variability(model, x, coarsen, solver.deadline)
        others = {}
        for name, key in (solvar_keys or {}).items():
            others[name], res.solvar_keys_complete[name] = block_solution_variability(model, x, key, solver.deadline)
        res.seconds_solvar = time.perf_counter() - t1
        t1 = time.perf_counter()
        res.blocks_coarse, res.coarse_complete = coarse_block_variability(solver, model, x, coarsen)
        for b, f in solvar.items():
            res.blocks_coarse.setdefault(b, {"zero_variability": None, "persons": f["persons"]}).update(
                solvar=f["solvar"], solvar_exact=f["exact"])
        for name, found in others.items():
            for b, f in found.items():
                res.blocks_coarse.setdefault(b, {"zero_variability": None, "persons": f["persons"]})[
                    f"solvar_{name}"] = f["solvar"]
        res.seconds_coarse = time.perf_counter() - t1
        t1 = time.perf_counter()
    if certify_support:
        on = np.flatnonzero(x > 0)
        levels, complete = certify(solver, on, x[on])
        cert = np.zeros_like(x)
        cert[on] = levels
        res.certified, res.certification_complete = cert, complete
        res.blocks = _blocks(solver, model, x, cert) if complete else {}
    res.seconds_certify = time.perf_counter() - t1
    res.integer_solves, res.lp_solves = solver.integer_solves, solver.lp_solves
    return res, solver


def _blocks(solver: ExactSolver, model: CountModel, x: np.ndarray, cert: np.ndarray) -> dict:
    names = list(model.domain.names)
    block = model.codes[:, names.index("BLOCK")] if "BLOCK" in names else np.zeros(len(x), np.int64)
    out = {}
    for b in np.unique(block[x > 0]):
        cols = np.flatnonzero(block == b)
        support = cols[x[cols] > 0]
        lo, hi = solver.lp_range(cols)
        fixed_total = lo is not None and hi is not None and abs(hi - lo) < 1e-6
        exact = bool(fixed_total and np.all(cert[support] == x[support]))
        out[int(b)] = {"persons": int(x[cols].sum()), "zero_variability": exact,
                       "certified_persons": int(cert[cols].sum())}
    return out


@dataclass
class RowCertificates:
    """Which rows every consistent dataset contains (``proven``), and which rows were decided
    either way (``decided``: proven, or shown absent from some consistent dataset). A row the
    time limit left undecided is neither: ``complete`` says whether every row was decided, so a
    count of proven rows is never silently short."""

    proven: np.ndarray
    decided: np.ndarray

    @property
    def complete(self) -> bool:
        return bool(self.decided.all())

    @property
    def undecided(self) -> int:
        return int((~self.decided).sum())


def certify_rows(solver: ExactSolver, model: CountModel, keys: np.ndarray) -> RowCertificates:
    """Which of the rows ``keys`` every consistent dataset contains (Generate-then-Verify on any
    candidate list): proven when the LP minimum of the row's variable is positive, or "x ≤ 0" is
    infeasible. A row whose variable a published zero removed is in no consistent dataset
    (decided, not proven); so is a row whose LP minimum 0 is attained by an integral solution.
    Rows left when the time runs out, or whose integer solve hit it, are undecided."""
    pos = {k: i for i, k in enumerate(model.keys().tolist())}
    proven = np.zeros(len(keys), dtype=bool)
    decided = np.zeros(len(keys), dtype=bool)
    for i, k in enumerate(np.asarray(keys).tolist()):
        v = pos.get(k)
        if v is None:
            decided[i] = True
            continue
        if solver.left() <= 0:
            continue
        got = solver.lp_min(v)
        if got is None:
            continue
        lo, integral = got
        if lo > 1e-6:
            proven[i] = decided[i] = True
        elif integral:  # x_v = 0 is a solution of the tables
            decided[i] = True
        else:
            verdict = solver.feasible_with_upper(v, 0)
            proven[i] = verdict == "infeasible"
            decided[i] = verdict in ("infeasible", "feasible")
    return RowCertificates(proven, decided)


# ---- noisy tables: the least-deviation reconstruction -------------------------------------------


def query_matrix(workload) -> sp.csr_matrix:
    """(queries × every cell of the domain) 0/1 matrix of a product-query workload, cells row-major
    (:meth:`Domain.encode`): each query's cells enumerated as the product of its value sets (work in
    proportion to the non-zeros)."""
    dom = workload.domain
    q = np.array(workload.queries, dtype=np.int64).reshape(len(workload.queries), len(dom))
    vs = workload.value_sets
    rows, cols = [], []
    for i in range(len(q)):
        sets = [np.array(sorted(vs[j][q[i, j]]), dtype=np.int64) for j in range(len(dom))]
        grid = np.ix_(*sets)
        flat = np.ravel_multi_index(tuple(np.broadcast_arrays(*grid)), dom.sizes).ravel()
        rows.append(np.full(len(flat), i, dtype=np.int64))
        cols.append(flat)
    r, c = np.concatenate(rows), np.concatenate(cols)
    return sp.csr_matrix((np.ones(len(r), dtype=np.float64), (r, c)), shape=(len(q), int(np.prod(dom.sizes))))


